"""Config loading and strict validation: every problem named by its key path."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from vllm_guardian.config.loader import (
    config_to_dict,
    load_config,
    load_yaml,
    parse_config,
    render_check,
    resolve_defaults,
)
from vllm_guardian.config.schema import Config, KubernetesMatch, MatchConfig, RestartConfig, TargetConfig
from vllm_guardian.config.schema_detectors import BusyLoopConfig, DetectorsConfig
from vllm_guardian.errors import ConfigError


def host() -> str:
    return "node-a"


def parse(data):
    return parse_config(data, hostname=host)


def problems_of(data) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(data)
    return info.value.problems


def target(**overrides):
    t = {"name": "llama", "match": {"port": 8000}}
    t.update(overrides)
    return t


KNOWN_TOP = ", ".join(f.name for f in dataclasses.fields(Config))  # every section, in schema order
KNOWN_DETECTORS = ", ".join(f.name for f in dataclasses.fields(DetectorsConfig))
MATCHERS = "one of port, pid_file, cmdline_regex, systemd_unit, kubernetes"

# (data, one expected problem line, exactly)
ERROR_CASES = {
    "unknown top-level key": ({"intervall": 1}, f"intervall: unknown key (known: {KNOWN_TOP})"),
    "unknown nested key": (
        {"detectors": {"busy_loop": {"windw": 10}}},
        "detectors.busy_loop.windw: unknown key (known: mode, window, cpu_ratio, "
        "max_voluntary_per_cpu_second, running_fraction, min_coverage, open_after, resolve_after)",
    ),
    "unknown detector": (
        {"detectors": {"busyloop": {}}},
        f"detectors.busyloop: unknown key (known: {KNOWN_DETECTORS})",
    ),
    "unknown key inside a list item": (
        {"targets": [target(prot=1)]},
        "targets[0].prot: unknown key (known: name, match, api_url, model, api_key_env, "
        "api_key_file, restart, drain, log_path)",
    ),
    "string for a number": (
        {"detectors": {"busy_loop": {"window": "ten"}}},
        'detectors.busy_loop.window: expected a number > 0, got "ten"',
    ),
    "bool for a number": ({"interval": True}, "interval: expected a number > 0, got true"),
    "zero for positive": ({"interval": 0}, "interval: expected a number > 0, got 0"),
    "negative for nonneg": (
        {"evidence": {"record_seconds": -1}},
        "evidence.record_seconds: expected a number >= 0, got -1",
    ),
    "a discovery pass waited for longer than a tick can stall": (
        {"discovery": {"pass_wait": 30}},
        "discovery.pass_wait: expected at most 5 seconds (the loop waits that long), got 30",
    ),
    "a negative discovery pass wait": (
        {"discovery": {"pass_wait": -0.5}},
        "discovery.pass_wait: expected a number >= 0, got -0.5",
    ),
    "a discovery pass abandoned before it can finish": (
        {"discovery": {"stuck_after": 0.01}},
        "discovery.stuck_after: expected at least 1 second (a pass of a busy node takes tens of "
        "milliseconds), got 0.01",
    ),
    "ratio above 1": (
        {"detectors": {"busy_loop": {"cpu_ratio": 1.5}}},
        "detectors.busy_loop.cpu_ratio: expected a number between 0 and 1, got 1.5",
    ),
    "float for an integer": (
        {"detectors": {"busy_loop": {"open_after": 1.5}}},
        "detectors.busy_loop.open_after: expected an integer > 0, got 1.5",
    ),
    "null for a non-optional scalar": ({"autodiscover": None}, "autodiscover: expected true or false, got null"),
    "yes-string for a bool": ({"policy": {"dry_run": "yes"}}, 'policy.dry_run: expected true or false, got "yes"'),
    "number for a string": ({"state_dir": 5}, "state_dir: expected a string, got 5"),
    "bad detector mode": (
        {"detectors": {"engine_stall": {"mode": "fix"}}},
        'detectors.engine_stall.mode: expected one of observe, alert, remediate, got "fix"',
    ),
    "bad onoff": ({"accelerators": {"nvml": "on"}}, 'accelerators.nvml: expected one of auto, off, got "on"'),
    "bool for onoff": (
        {"accelerators": {"npu_smi": False}},
        "accelerators.npu_smi: expected one of auto, off, got false",
    ),
    "restart mode that is no name": (  # which names exist: the methods table (test_restart_methods_table)
        {"targets": [target(restart={"mode": "Re-boot"})]},
        "targets[0].restart.mode: expected a restart method's name (lowercase letters, digits, '_'), got \"Re-boot\"",
    ),
    "bad when_redis_down": (
        {"policy": {"fleet": {"when_redis_down": "maybe"}}},
        'policy.fleet.when_redis_down: expected one of allow, deny, got "maybe"',
    ),
    "bad redis url": (
        {"alerts": {"redis_url": "http://redis:6379"}},
        'alerts.redis_url: expected "embedded" or a redis://, rediss://, unix://, redis+sentinel:// or '
        'redis+cluster:// URL, got "http://redis:6379" (unknown scheme "http://": expected redis://, rediss://, '
        "unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://)",
    ),
    "negative lease replicas": (
        {"policy": {"fleet": {"lease_replicas": -1}}},
        "policy.fleet.lease_replicas: expected an integer >= 0, got -1",
    ),
    "alerts wait_replicas not a number": (
        {"alerts": {"wait_replicas": "all"}},
        'alerts.wait_replicas: expected an integer >= 0, got "all"',
    ),
    "sentinel url without the master's name": (
        {"alerts": {"redis_url": "redis+sentinel://s1:26379,s2:26379"}},
        'alerts.redis_url: expected "embedded" or a redis://, rediss://, unix://, redis+sentinel:// or '
        'redis+cluster:// URL, got "redis+sentinel://s1:26379,s2:26379" (redis+sentinel:// needs the master\'s '
        "name: redis+sentinel://host:26379/mymaster)",
    ),
    "bad regex": (
        {"targets": [target(match={"cmdline_regex": "(vllm"})]},
        "targets[0].match.cmdline_regex: expected a valid regular expression or null, "
        'got "(vllm" (missing ), unterminated subpattern at position 0)',
    ),
    "port out of range": (
        {"targets": [target(match={"port": 70000})]},
        "targets[0].match.port: expected a port number (1..65535) or null, got 70000",
    ),
    "port as a string": (
        {"targets": [target(match={"port": "8000"})]},
        'targets[0].match.port: expected a port number (1..65535) or null, got "8000"',
    ),
    "bad hostport": ({"api": {"http": "9464"}}, 'api.http: expected a "host:port" address or null, got "9464"'),
    "hostport with a bad port": (
        {"api": {"http": "127.0.0.1:0"}},
        'api.http: expected a "host:port" address or null, got "127.0.0.1:0"',
    ),
    "section that is not a mapping": ({"probes": ["procfs"]}, 'probes: expected a mapping, got ["procfs"]'),
    "targets not a list": (
        {"targets": {"name": "llama"}},
        'targets: expected a list of mappings, got {"name": "llama"}',
    ),
    "list item not a mapping": ({"targets": [target(), "llama"]}, 'targets[1]: expected a mapping, got "llama"'),
    "argv as a shell string": (
        {"targets": [target(restart={"mode": "command", "command": "vllm serve m"})]},
        'targets[0].restart.command: expected a list of strings, got "vllm serve m"',
    ),
    "unquoted number in argv": (
        {"targets": [target(restart={"mode": "command", "command": ["vllm", "--port", 8000]})]},
        "targets[0].restart.command[2]: expected a string, got 8000",
    ),
    "non-string env value": (
        {"targets": [target(restart={"env": {"CUDA_VISIBLE_DEVICES": 0}})]},
        "targets[0].restart.env.CUDA_VISIBLE_DEVICES: expected a string, got 0",
    ),
    "missing target name": ({"targets": [{"match": {"port": 8000}}]}, "targets[0].name: required"),
    "missing target match": ({"targets": [{"name": "llama"}]}, "targets[0].match: required"),
    "bad target name": (
        {"targets": [target(name="my llama")]},
        "targets[0].name: expected a name of letters, digits, '_', '.', '-', got \"my llama\"",
    ),
    "two matchers": (
        {"targets": [target(match={"port": 8000, "pid_file": "/run/vllm.pid"})]},
        f"targets[0].match: exactly one matcher must be set ({MATCHERS}), got 2 (port, pid_file)",
    ),
    "no matcher": (
        {"targets": [target(match={})]},
        f"targets[0].match: exactly one matcher must be set ({MATCHERS}), got none",
    ),
    "empty kubernetes matcher": (
        {"targets": [target(match={"kubernetes": {}})]},
        "targets[0].match.kubernetes: set namespace (with pod or selector), or pod_uid",
    ),
    "kubernetes pod without its namespace": (
        {"targets": [target(match={"kubernetes": {"selector": "app=vllm"}})]},
        "targets[0].match.kubernetes.namespace: required with pod or selector (pods are listed per namespace)",
    ),
    "duplicate target names": (
        {"targets": [target(), target(match={"port": 8001})]},
        'targets[1].name: duplicate target name "llama" (also targets[0])',
    ),
    "command mode without argv": (
        {"targets": [target(restart={"mode": "command"})]},
        "targets[0].restart.command: required (a non-empty argv list) when restart.mode is command",
    ),
    "systemd mode without a unit": (
        {"targets": [target(restart={"mode": "systemd"})]},
        "targets[0].restart.unit: required when restart.mode is systemd (or match the target by match.systemd_unit)",
    ),
}


@pytest.mark.parametrize("data, expected", ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_invalid_config_is_reported_with_its_key_path(data, expected):
    assert expected in problems_of(data)


@pytest.mark.parametrize("data, expected", ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_each_invalid_config_reports_only_its_own_problem(data, expected):
    assert problems_of(data) == [expected]


def test_several_problems_are_reported_at_once():
    data = {
        "interval": "fast",
        "bogus": 1,
        "detectors": {"busy_loop": {"mode": "fix"}},
        "targets": [target(match={}), target(restart={"mode": "command"})],
    }
    assert problems_of(data) == [
        f"bogus: unknown key (known: {KNOWN_TOP})",
        'interval: expected a number > 0, got "fast"',
        'detectors.busy_loop.mode: expected one of observe, alert, remediate, got "fix"',
        f"targets[0].match: exactly one matcher must be set ({MATCHERS}), got none",
        'targets[1].name: duplicate target name "llama" (also targets[0])',
        "targets[1].restart.command: required (a non-empty argv list) when restart.mode is command",
    ]


def test_config_error_message_joins_the_problems():
    with pytest.raises(ConfigError, match="interval: expected a number > 0, got 0"):
        parse({"interval": 0})


@pytest.mark.parametrize("data", [[1, 2], "interval: 1", 3], ids=["list", "string", "number"])
def test_a_document_that_is_not_a_mapping_is_named_by_its_source(data):
    with pytest.raises(ConfigError) as info:
        parse_config(data, source="/etc/g.yaml", hostname=host)
    assert info.value.problems == [f"/etc/g.yaml: expected a mapping at the top level, got {json.dumps(data)}"]


# ---------------------------------------------------------------- valid configs
@pytest.mark.parametrize("data", [None, {}], ids=["null", "empty mapping"])
def test_empty_data_gives_the_defaults(data):
    assert parse(data) == dataclasses.replace(Config(), node="node-a")


def test_node_is_resolved_to_the_host_name_when_unset():
    assert parse({}).node == "node-a"


def test_configured_node_is_kept():
    assert parse({"node": "gpu-17"}).node == "gpu-17"


def test_resolve_defaults_keeps_the_dataclass_default_none_until_called():
    assert Config().node is None
    assert resolve_defaults(Config(), hostname=host).node == "node-a"


def test_ints_are_accepted_where_floats_are_expected_and_become_floats():
    window = parse({"detectors": {"busy_loop": {"window": 15}}}).detectors.busy_loop.window
    assert window == 15.0 and isinstance(window, float)


def test_lists_become_tuples():
    argv = ["vllm", "serve", "m", "--port", "8000"]
    cfg = parse(
        {"targets": [target(restart={"mode": "command", "command": argv}, drain={"hook": ["/bin/lb-drain", "llama"]})]}
    )
    assert isinstance(cfg.targets, tuple)
    assert cfg.targets[0].restart.command == tuple(argv)
    assert cfg.targets[0].drain.hook == ("/bin/lb-drain", "llama")


def test_unset_keys_take_their_defaults():
    cfg = parse({"detectors": {"busy_loop": {"window": 5}}})
    assert cfg.detectors.busy_loop == BusyLoopConfig(window=5.0)
    assert cfg.detectors.engine_stall == DetectorsConfig().engine_stall


def test_a_full_target_maps_onto_the_dataclasses():
    cfg = parse(
        {
            "targets": [
                {
                    "name": "llama",
                    "match": {"kubernetes": {"namespace": "llm", "pod": "vllm-0"}},
                    "restart": {"mode": "kubernetes", "env": {"A": "1"}, "stop_timeout": 10},
                }
            ]
        }
    )
    assert cfg.targets == (
        TargetConfig(
            name="llama",
            match=MatchConfig(kubernetes=KubernetesMatch(namespace="llm", pod="vllm-0")),
            restart=RestartConfig(mode="kubernetes", env={"A": "1"}, stop_timeout=10.0),
        ),
    )


@pytest.mark.parametrize(
    "data",
    [
        {"targets": None},
        {"detectors": None},
        {"detectors": {"busy_loop": None}},
    ],
    ids=["targets", "section", "nested section"],
)
def test_an_empty_section_means_its_defaults(data):
    assert parse(data) == parse({})


def test_optional_fields_accept_null():
    cfg = parse({"api": {"http": None, "socket": None}, "targets": [target(api_url=None)]})
    assert cfg.api.http is None and cfg.targets[0].api_url is None


def test_systemd_mode_accepts_the_unit_from_the_matcher():
    cfg = parse({"targets": [target(match={"systemd_unit": "vllm.service"}, restart={"mode": "systemd"})]})
    assert cfg.targets[0].restart.mode == "systemd"


@pytest.mark.parametrize(
    "url",
    [
        "embedded",
        "redis://r:6379/0",
        "rediss://r:6380",
        "unix:///run/r.sock",
        "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster",
        "redis+cluster://c1:6379,c2:6379",
    ],
)
def test_redis_url_accepts_embedded_and_redis_schemes(url):
    assert parse({"alerts": {"redis_url": url}}).alerts.redis_url == url


@pytest.mark.parametrize("http", ["127.0.0.1:9464", "0.0.0.0:1", "[::1]:65535", "localhost:9464"])
def test_api_http_accepts_host_port(http):
    assert parse({"api": {"http": http}}).api.http == http


# ---------------------------------------------------------------- load_config
def write(tmp_path, text: str) -> str:
    path = tmp_path / "guardian.yaml"
    path.write_text(text)
    return str(path)


def test_load_config_reads_and_validates_a_file(tmp_path):
    path = write(tmp_path, "interval: 2\naccelerators: {nvml: off}\n")
    cfg = load_config(path, hostname=host)
    assert (cfg.interval, cfg.accelerators.nvml, cfg.node) == (2.0, "off", "node-a")


def test_load_config_names_a_missing_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert info.value.problems == [f"{missing}: no such file"]


def test_load_config_rejects_a_directory(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path))
    assert info.value.problems == [f"{tmp_path}: is a directory, not a config file"]


def test_load_config_reports_a_yaml_syntax_error_with_its_line(tmp_path):
    path = write(tmp_path, "interval: 1\ndetectors:\n  busy_loop: {mode: alert\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [problem] = info.value.problems
    assert problem.startswith(f"{path}: YAML syntax error at line 4, column 1: ")


def test_load_config_reports_problems_with_key_paths(tmp_path):
    path = write(tmp_path, "detectors:\n  busy_loop:\n    window: ten\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == ['detectors.busy_loop.window: expected a number > 0, got "ten"']


@pytest.mark.parametrize("text", ["", "\n", "# only comments\n"], ids=["empty", "blank", "comments"])
def test_load_config_of_an_empty_file_gives_the_defaults(tmp_path, text):
    assert load_config(write(tmp_path, text), hostname=host) == parse({})


def test_load_config_without_a_path_uses_the_default_file_when_it_exists(tmp_path):
    path = write(tmp_path, "interval: 5\n")
    assert load_config(None, default_path=path, hostname=host).interval == 5.0


def test_load_config_without_a_path_or_default_file_gives_the_defaults(tmp_path):
    cfg = load_config(None, default_path=str(tmp_path / "absent.yaml"), hostname=host)
    assert cfg == parse({})


# ---------------------------------------------------------------- YAML dialect
@pytest.mark.parametrize("word", ["off", "on", "yes", "no", "Off", "NO"])
def test_yaml_1_1_boolean_words_stay_strings(word):
    assert load_yaml(f"key: {word}\n") == {"key": word}


@pytest.mark.parametrize("word, value", [("true", True), ("false", False), ("True", True), ("FALSE", False)])
def test_yaml_true_and_false_are_booleans(word, value):
    assert load_yaml(f"key: {word}\n") == {"key": value}


def test_a_yes_for_a_bool_in_a_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "autodiscover: yes\n"))
    assert info.value.problems == ['autodiscover: expected true or false, got "yes"']


def test_duplicate_keys_are_errors_with_their_line():
    with pytest.raises(ConfigError) as info:
        load_yaml("interval: 1\napi:\n  http: a:1\n  http: b:2\n", source="g.yaml")
    assert info.value.problems == ['g.yaml: line 4: duplicate key "http"']


def test_yaml_merge_keys_are_not_duplicates():
    text = "base: &b {mode: alert, window: 5}\nbusy: {<<: *b, mode: observe}\n"
    assert load_yaml(text)["busy"] == {"mode": "observe", "window": 5}


# ---------------------------------------------------------------- rendering
def test_config_to_dict_is_plain_data():
    cfg = parse({"targets": [target(restart={"mode": "command", "command": ["vllm", "serve"]})]})
    data = config_to_dict(cfg)
    assert data["targets"][0]["restart"]["command"] == ["vllm", "serve"]
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"node": "n1", "targets": [target(restart={"mode": "command", "command": ["vllm"], "env": {"A": "b"}})]},
        {
            "targets": [target(match={"kubernetes": {"namespace": "llm", "pod": "p"}}, restart={"mode": "kubernetes"})],
            "api": {"http": None},
            "accelerators": {"nvml": "off"},
        },
    ],
    ids=["defaults", "command target", "kubernetes target"],
)
def test_config_to_dict_round_trips_through_parse_config(data):
    cfg = parse(data)
    assert parse(config_to_dict(cfg)) == cfg


def test_render_check_is_yaml_of_the_effective_config_that_loads_back(tmp_path):
    cfg = parse({"accelerators": {"npu_smi": "off"}, "targets": [target()]})
    text = render_check(cfg)
    assert yaml.safe_load(text) == config_to_dict(cfg)
    assert load_config(write(tmp_path, text), hostname=host) == cfg


def test_check_config_prints_only_the_effective_config_and_the_docs_promise_nothing_else():
    """The docs once promised inactive keys "as comments": there are none, and the docs say so."""
    from pathlib import Path

    text = render_check(parse({}))
    assert not [line for line in text.splitlines() if line.lstrip().startswith("#")]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert "as comments" not in doc and "every key it accepts is acted on" in doc

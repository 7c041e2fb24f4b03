"""API keys: where a server's key is read from, which requests carry it, and that it never leaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema import CanaryProbeConfig, MatchConfig, TargetConfig
from vllm_guardian.errors import ConfigError
from vllm_guardian.host.api_keys import (
    ApiKeys,
    BearerHttpClient,
    KeySource,
    key_from_argv,
    needs_key,
    origin_of,
    resolve_key,
)
from vllm_guardian.host.procfs_parse import environ_value
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target
from vllm_guardian.probes.canary import run_canary
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree

SECRET = "sk-test-0123456789abcdef"
COMPLETION = ok('{"choices": [{"text": "!"}]}')


@pytest.mark.parametrize(
    "argv, expected",
    [
        (("vllm", "serve", "m", "--api-key", SECRET), SECRET),
        (("vllm", "serve", "m", f"--api-key={SECRET}"), SECRET),
        (("vllm", "serve", "m", "--api-key", SECRET, "other-key", "--port", "8000"), SECRET),
        (("vllm", "serve", "m", "--api-key", "old", "--api-key", SECRET), SECRET),
        (("vllm", "serve", "m", "--api-key"), None),
        (("vllm", "serve", "m", "--api-key", "--port", "8000"), None),
        (("vllm", "serve", "m", "--api-key-file", "x"), None),
        (("vllm", "serve", "m"), None),
    ],
)
def test_key_from_the_servers_command_line(argv, expected):
    assert key_from_argv(argv) == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"PATH=/bin\0VLLM_API_KEY=abc\0HOME=/root\0", "abc"),
        (b"VLLM_API_KEY=first\0VLLM_API_KEY=last\0", "last"),
        (b"VLLM_API_KEYS=no\0XVLLM_API_KEY=no\0", None),
        (b"", None),
    ],
)
def test_a_variable_from_proc_environ(raw, expected):
    assert environ_value(raw, "VLLM_API_KEY") == expected


@pytest.mark.parametrize(
    "url, guarded",
    [
        ("http://127.0.0.1:8000/v1/completions", True),
        ("http://127.0.0.1:8000/v1/models", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.0.0.1:8000/health", False),
        ("http://127.0.0.1:8000/metrics", False),
        ("http://127.0.0.1:8000/v10/x", False),
    ],
)
def test_only_v1_paths_need_the_key_as_in_vllm(url, guarded):
    assert needs_key(url) is guarded


def test_origin_fills_the_default_port_and_lowercases_the_host():
    assert origin_of("http://LOCALHOST/v1/models") == "http://localhost:80"
    assert origin_of("https://pod.ns.svc:8443/x") == "https://pod.ns.svc:8443"


# ---------------------------------------------------------------- resolution order
def _target(**kw) -> TargetConfig:
    return TargetConfig(name="t", match=MatchConfig(port=8000), **kw)


@pytest.fixture
def proc(tmp_path):
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(42, cmdline=("vllm", "serve", "m"))
    return tree


def test_config_env_is_read_from_the_guardians_environment(proc):
    src = resolve_key(_target(api_key_env="GUARD_KEY"), 42, (), proc.procfs(), environ={"GUARD_KEY": SECRET})
    assert (src.key, src.origin) == (SECRET, "config env GUARD_KEY")


def test_an_unset_config_env_is_a_problem_naming_the_variable(proc):
    src = resolve_key(_target(api_key_env="GUARD_KEY"), 42, ("--api-key", "x"), proc.procfs(), environ={})
    assert src.key is None and "GUARD_KEY is not set" in src.problem


def test_config_file_first_line_stripped(proc, tmp_path):
    path = tmp_path / "key"
    path.write_text(f"  {SECRET}\nignored\n")
    src = resolve_key(_target(api_key_file=str(path)), 42, (), proc.procfs(), environ={})
    assert (src.key, src.origin) == (SECRET, f"config file {path}")


def test_a_key_file_that_is_not_utf8_is_a_problem_not_a_crash(proc, tmp_path):
    path = tmp_path / "key"
    path.write_bytes(b"sk-\xff\xfe\n")
    src = resolve_key(_target(api_key_file=str(path)), 42, (), proc.procfs(), environ={})
    assert src.key is None and "not UTF-8" in src.problem


def test_a_missing_key_file_is_a_problem_not_a_crash(proc, tmp_path):
    src = resolve_key(_target(api_key_file=str(tmp_path / "nope")), 42, (), proc.procfs(), environ={})
    assert src.key is None and "No such file" in src.problem


def test_without_config_the_servers_argument_wins_over_its_environment(proc):
    proc.set_environ(42, VLLM_API_KEY="from-env")
    src = resolve_key(None, 42, ("vllm", "serve", "--api-key", SECRET), proc.procfs(), environ={})
    assert (src.key, src.origin) == (SECRET, "--api-key of pid 42")


def test_without_config_or_argument_the_servers_environment_is_read(proc):
    proc.set_environ(42, PATH="/bin", VLLM_API_KEY=SECRET)
    src = resolve_key(None, 42, ("vllm", "serve"), proc.procfs(), environ={})
    assert (src.key, src.origin) == (SECRET, "VLLM_API_KEY of pid 42")


def test_an_unreadable_environ_means_no_key_with_the_reason(proc):
    proc.deny("42/environ")
    src = resolve_key(None, 42, ("vllm", "serve"), proc.procfs(), environ={})
    assert src.key is None and "AccessDenied" in src.problem


def test_a_key_source_never_shows_the_key_in_its_repr():
    assert SECRET not in repr(KeySource(SECRET, "config env X")) + str(KeySource(SECRET, "config env X"))


# ---------------------------------------------------------------- the client
def _sim_target(name: str, pid: int, port: int, argv: tuple[str, ...]) -> Target:
    key = ProcKey(pid, 100)
    return Target(name, key, (ProcessInfo(key, 1, Role.API_SERVER, argv),), port, f"http://127.0.0.1:{port}")


def _keys(proc) -> ApiKeys:
    keys = ApiKeys(parse_config({"autodiscover": False}), proc.procfs(), environ={})
    keys.update(
        [
            _sim_target("a", 42, 8000, ("vllm", "serve", "--api-key", SECRET)),
            _sim_target("b", 43, 8001, ("vllm", "serve")),
        ]
    )
    return keys


def test_v1_requests_to_a_server_with_a_key_carry_the_bearer_header(proc):
    proc.add_process(43, cmdline=("vllm", "serve"))
    http = FakeHttp({("POST", "/v1/completions"): COMPLETION})
    client = BearerHttpClient(http, _keys(proc))
    client.request("POST", "http://127.0.0.1:8000/v1/completions", 1.0, body={})
    client.request("GET", "http://127.0.0.1:8000/health", 1.0)
    client.request("GET", "http://127.0.0.1:8000/metrics", 1.0)
    client.request("POST", "http://127.0.0.1:8001/v1/completions", 1.0, body={})
    assert [h.get("Authorization") for h in http.headers] == [f"Bearer {SECRET}", None, None, None]


def test_a_restarted_server_has_its_key_read_again(proc):
    keys = _keys(proc)
    proc.add_process(44, cmdline=("vllm", "serve"))
    proc.set_environ(44, VLLM_API_KEY="rotated")
    keys.update([_sim_target("a", 44, 8000, ("vllm", "serve"))])
    assert keys.source_for("http://127.0.0.1:8000/v1/models").key == "rotated"


def test_the_environ_of_a_process_that_blocked_a_pass_is_never_read_again(proc):
    """A read of /proc/<pid>/environ that did not return got its pass abandoned; the next pass
    must not block on it again."""
    proc.add_process(45, cmdline=("vllm", "serve"))
    proc.set_environ(45, VLLM_API_KEY="from-environ")
    target = _sim_target("a", 45, 8000, ("vllm", "serve"))
    keys = ApiKeys(parse_config({"autodiscover": False}), proc.procfs(opener=_refuse_environ), environ={})
    keys.update([target], skip=frozenset({target.key}))
    source = keys.source_for("http://127.0.0.1:8000/v1/models")
    assert source.key is None and "blocked a discovery pass" in (source.problem or "")


def _refuse_environ(path: str) -> bytes:
    if path.endswith("/environ"):
        raise AssertionError(f"{path} was read")
    with open(path, "rb") as f:
        return f.read()


def test_a_refused_key_is_read_again_on_the_next_pass(proc, tmp_path):
    path = tmp_path / "key"
    path.write_text("old")
    cfg = parse_config(
        {"autodiscover": False, "targets": [{"name": "a", "match": {"port": 8000}, "api_key_file": str(path)}]}
    )
    keys = ApiKeys(cfg, proc.procfs(), environ={})
    target = _sim_target("a", 42, 8000, ("vllm", "serve"))
    keys.update([target])
    path.write_text("new")
    keys.update([target])
    assert keys.source_for("http://127.0.0.1:8000/v1/models").key == "old"  # cached while it works
    http = FakeHttp({("GET", "/v1/models"): ok('{"error":"Unauthorized"}', status=401)})
    BearerHttpClient(http, keys).request("GET", "http://127.0.0.1:8000/v1/models", 1.0)
    keys.update([target])
    assert keys.source_for("http://127.0.0.1:8000/v1/models").key == "new"


def test_origins_for_status_name_the_source_never_the_key(proc):
    proc.add_process(43, cmdline=("vllm", "serve"))
    assert _keys(proc).origins() == {"a": "--api-key of pid 42", "b": "none"}


# ---------------------------------------------------------------- the canary on 401/403
def _enforcing(key: str):
    def answer(body, headers):
        if headers.get("Authorization") != f"Bearer {key}":
            return ok('{"error": "Unauthorized"}', status=401)
        return COMPLETION

    return answer


@pytest.mark.parametrize("server_key, expect_ok", [(SECRET, True), ("another-key", False)])
def test_the_canary_authenticates_with_the_servers_key(proc, server_key, expect_ok):
    proc.add_process(43, cmdline=("vllm", "serve"))
    http = FakeHttp({("POST", "/v1/completions"): _enforcing(server_key)})
    res = run_canary(
        BearerHttpClient(http, _keys(proc)), "a", "http://127.0.0.1:8000", "m", CanaryProbeConfig(), lambda: 0.0
    )
    assert res.ok is expect_ok
    assert res.auth_status == (None if expect_ok else 401)


def test_a_refused_key_is_reported_with_its_source_and_never_its_value(proc):
    proc.add_process(43, cmdline=("vllm", "serve"))
    http = FakeHttp({("POST", "/v1/completions"): _enforcing("another-key")})
    res = run_canary(
        BearerHttpClient(http, _keys(proc)), "a", "http://127.0.0.1:8000", "m", CanaryProbeConfig(), lambda: 0.0
    )
    assert res.error is not None
    assert "HTTP 401 on /v1/completions" in res.error and "--api-key of pid 42" in res.error
    assert SECRET not in repr(res)


def test_no_key_at_all_says_how_to_configure_one(proc):
    http = FakeHttp({("GET", "/v1/models"): ok('{"error": "Unauthorized"}', status=401)})
    res = run_canary(http, "a", "http://127.0.0.1:8000", None, CanaryProbeConfig(), lambda: 0.0)
    assert res.auth_status == 401 and not res.timed_out
    assert res.error is not None and "api_key_env or api_key_file" in res.error


def test_403_counts_as_an_auth_failure_too():
    http = FakeHttp({("POST", "/v1/completions"): ok("forbidden", status=403)})
    res = run_canary(http, "a", "http://127.0.0.1:8000", "m", CanaryProbeConfig(), lambda: 0.0)
    assert res.auth_status == 403


# ---------------------------------------------------------------- config
def _problems(target: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config({"targets": [{"name": "t", "match": {"port": 8000}, **target}]})
    return exc.value.problems


def test_a_key_written_in_the_config_is_refused_with_what_to_do_instead():
    (problem,) = _problems({"api_key": SECRET})
    assert problem.startswith("targets[0].api_key: an API key is never written in the config")
    assert "api_key_env" in problem and "api_key_file" in problem and SECRET not in problem


def test_env_and_file_together_are_refused():
    assert _problems({"api_key_env": "K", "api_key_file": "/k"}) == [
        "targets[0]: set api_key_env or api_key_file, not both"
    ]


# ---------------------------------------------------------------- what a key may hold
def _key_file(tmp_path, text: str) -> str:
    path = tmp_path / "key"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("source", ["environ", "argv", "config env", "config file"])
def test_a_key_with_a_trailing_newline_is_sent_without_it_whatever_its_source(proc, tmp_path, source):
    raw = SECRET + "\n"
    cfg, environ = None, {}
    argv: tuple[str, ...] = ("vllm", "serve")
    if source == "environ":
        proc.set_environ(42, VLLM_API_KEY=raw)
    elif source == "argv":
        argv = ("vllm", "serve", "--api-key", raw)
    elif source == "config env":
        cfg, environ = _target(api_key_env="GUARD_KEY"), {"GUARD_KEY": raw}
    else:
        cfg = _target(api_key_file=_key_file(tmp_path, raw))
    src = resolve_key(cfg, 42, argv, proc.procfs(), environ=environ, read_file=lambda p: Path(p).read_text())
    assert src.key == SECRET and not src.problem


@pytest.mark.parametrize("bad", [SECRET[:6] + "\n" + SECRET[6:], SECRET + "\r\nX-Evil: 1", SECRET + "\x1b[2J"])
def test_a_key_holding_a_control_character_is_refused_naming_its_source_never_the_key(proc, bad):
    proc.set_environ(42, VLLM_API_KEY=bad)
    src = resolve_key(None, 42, ("vllm", "serve"), proc.procfs(), environ={})
    assert src.key is None
    assert "control character" in src.problem and "VLLM_API_KEY of pid 42" in src.problem
    assert SECRET[6:12] not in src.problem + repr(src)


# ---------------------------------------------------------------- whose key an address gets
@pytest.mark.parametrize("owner_first", [True, False])
def test_the_key_of_an_address_belongs_to_the_process_owning_its_socket_not_the_last_seen(proc, owner_first):
    """A process whose argv names the real server's port (and no key) must not take the key away."""
    from dataclasses import replace

    proc.add_process(43, cmdline=("vllm", "serve", "--port", "8000"))
    owner = replace(_sim_target("vllm-8000", 42, 8000, ("vllm", "serve", "--api-key", SECRET)), socket="owned")
    fake = replace(_sim_target("vllm-8000-43", 43, 8000, ("vllm", "serve", "--port", "8000")), socket="starting")
    keys = ApiKeys(None, proc.procfs(), environ={})
    keys.update([owner, fake] if owner_first else [fake, owner])
    assert keys.source_for("http://127.0.0.1:8000/v1/models").key == SECRET

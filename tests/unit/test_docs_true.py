"""The docs stay true: every ``guardian`` command line README.md, CONTRIBUTING.md and docs/ show
is one the CLI accepts, every metric name they name is exported, every config key they name
exists, every alert-event field they list is in the event, and every YAML or JSON snippet parses.

A newcomer copies from the docs: a doc that shows ``guardian alerts tail -n 20`` while the flag
is ``--count`` fails here, not at 3 a.m. Synopsis notation is read as a person reads it:
``<id>`` and ``TARGET`` are placeholders, ``[-n 20]`` is optional (checked with it), ``a|b`` and
``x | y`` are alternatives (the first is checked).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import typing
from pathlib import Path

import pytest
import yaml

from vllm_guardian.config.schema import Config, TargetConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.sinks.events import EVENT_FIELDS
from vllm_guardian.cli.parser import build_parser
from vllm_guardian.surface.exporter import DECLARED

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docs" / "runbooks").glob("*.md"),
    ]
)
IDS = [str(p.relative_to(ROOT)) for p in DOCS]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
PROCESS_COLLECTOR = {
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
}


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text(path))]


# ------------------------------------------------------------------ commands
def command_lines(path: Path) -> list[str]:
    """``guardian ...`` lines of code blocks and inline code (a ``$ `` prompt dropped)."""
    out = []
    for _, body in blocks(path):
        for line in body.splitlines():
            line = line.strip().removeprefix("$ ").removeprefix("sudo ")
            if line.startswith("guardian "):
                out.append(line)
    for m in INLINE.finditer(FENCE.sub("", text(path))):
        code = m.group(1).strip()
        if code.startswith("guardian ") and not code.startswith("guardian:"):
            out.append(code)
    return out


def as_argv(line: str) -> list[str]:
    """A documented line as the argv a person would type (placeholders filled, the first alternative)."""
    line = line.replace("\\|", "|")  # a pipe escaped in a table cell
    line = re.split(r"\s+#|\s{2,}", line.strip(), maxsplit=1)[0]  # a trailing comment or description
    line = re.split(r"\s(?:\||>|2>|&&|;)\s|\s\|\s*$", line, maxsplit=1)[0]  # a pipe, a redirection
    line = line.split(" | ")[0]
    line = re.sub(r"<[^>]*>", "x", line)  # <id>, <target>
    line = line.replace("[...]", "").replace("...", "").replace("…", "")
    line = line.replace("[", " ").replace("]", " ")
    words = []
    for w in shlex.split(line):
        w = w.split("|")[0] if "|" in w and not w.startswith("-") else w  # drain|restart -> drain
        w = re.sub(r"^[A-Z][A-Z0-9_]*$", "x", w)  # TARGET, ID, CONFIG, ENTRY_ID
        words.append(w)
    return words[1:]


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_documented_command_line_is_accepted_by_the_cli(path, capsys):
    parser = build_parser()
    refused = []
    for line in command_lines(path):
        argv = as_argv(line)
        if argv in ([], ["--help"], ["--version"]) or (len(argv) == 1 and line.count(" ") == 1):
            continue  # the program or a command named in prose (`guardian restart`), not a line to type
        try:
            parser.parse_args(argv)
        except SystemExit:
            refused.append(f"{line!r}: {capsys.readouterr().err.strip().splitlines()[-1:]}")
    assert refused == []


def test_the_synopsis_reader_fills_placeholders_and_takes_the_first_alternative():
    assert as_argv("guardian drain|restart TARGET [--dry-run]") == ["drain", "x", "--dry-run"]
    assert as_argv("guardian maintenance on --for 2h | off | status") == ["maintenance", "on", "--for", "2h"]
    assert as_argv("guardian alerts ack <entry-id> --group <group>") == ["alerts", "ack", "x", "--group", "x"]
    assert as_argv("guardian incidents list | head  # the newest") == ["incidents", "list"]


# ------------------------------------------------------------------ metrics
def exported_series() -> set[str]:
    names = set(PROCESS_COLLECTOR)
    for s in DECLARED:
        names.add(s.name)
        if s.type == "histogram":
            names |= {s.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return names


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_metric_the_docs_name_is_exported(path):
    named = set(re.findall(r"(?<![\w/.:-])(guardian_[a-z0-9_]+)", text(path)))
    named = {n for n in named if not n.endswith("_")}  # a prefix in prose (`guardian_process_*`)
    assert sorted(named - exported_series()) == []


# ------------------------------------------------------------------ config keys
def fields_of(cls: type) -> dict[str, typing.Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def dataclass_in(t: typing.Any) -> type | None:
    for c in (t, *typing.get_args(t)):
        if dataclasses.is_dataclass(c) and isinstance(c, type):
            return c
        for a in typing.get_args(c):  # tuple[TargetConfig, ...], dict[str, X]
            if dataclasses.is_dataclass(a) and isinstance(a, type):
                return a
    return None


def resolves(path: list[str], cls: type) -> bool:
    fields = fields_of(cls)
    if path[0] not in fields:
        return False
    inner = dataclass_in(fields[path[0]])
    if len(path) == 1:
        return True
    return inner is not None and resolves(path[1:], inner)


# the roots a doc writes a key from: the file's top level, a target's sections, a detector's block
ROOTS: dict[str, type] = {name: Config for name in fields_of(Config)}
ROOTS.update({name: TargetConfig for name in fields_of(TargetConfig) if dataclass_in(fields_of(TargetConfig)[name])})
FILE_SUFFIXES = (".md", ".yaml", ".yml", ".json", ".txt", ".html", ".py", ".svg", ".sock", ".service", ".pw", ".log")


def config_keys(path: Path) -> set[str]:
    keys = set()
    for m in INLINE.finditer(text(path)):
        for token in re.findall(r"(?<![\w.\]\[/-])[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+", m.group(1)):
            if token.split(".")[0] in ROOTS and not token.endswith(FILE_SUFFIXES):
                keys.add(token)
    return keys


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_config_key_the_docs_name_exists(path):
    missing = []
    for key in sorted(config_keys(path)):
        parts = key.split(".")
        root = ROOTS[parts[0]]
        ok = resolves(parts, root) or (
            root is Config and parts[0] == "detectors" and resolves(parts[1:], DetectorsConfig)
        )
        if not ok:
            missing.append(key)
    assert missing == []


# ------------------------------------------------------------------ the alert event
def test_the_event_fields_docs_alerts_lists_are_the_events_fields():
    doc = text(ROOT / "docs" / "alerts.md")
    example = next(json.loads(b) for lang, b in blocks(ROOT / "docs" / "alerts.md") if '"schema": 1' in b)
    assert set(example) == set(EVENT_FIELDS)
    table = set(re.findall(r"^\| `([a-z_]+)`(?: / `([a-z_]+)`)? \|", doc, re.M))
    listed = {name for pair in table for name in pair if name}
    assert listed <= set(EVENT_FIELDS)


# ------------------------------------------------------------------ snippets
@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_yaml_and_json_snippet_parses(path):
    for lang, body in blocks(path):
        if lang == "json":
            json.loads(body)
        elif lang in ("yaml", "yml"):
            yaml.safe_load(body)


# ------------------------------------------------------------------ commands run
RUNNABLE = {"check-config", "completion", "maintenance", "incidents"}  # need no daemon, no server, no root


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_the_documented_commands_that_need_no_daemon_run_and_succeed(path, tmp_path, capsys, monkeypatch):
    """Run against a config of our own (state in tmp_path): a documented -c path is replaced by it;
    `maintenance on` is run as documented, then turned off. Those that talk to a daemon, Redis or a
    server are checked by the parse test above and by the live tier."""
    from vllm_guardian.cli.main import main

    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "api": {"http": None}}))
    monkeypatch.delenv("GUARDIAN_CONFIG", raising=False)
    failed = []
    for line in command_lines(path):
        argv = as_argv(line)
        if not argv or argv[0] not in RUNNABLE or "x" in argv or (argv[0] == "incidents" and "show" in argv):
            continue
        if "-c" in argv and argv[0] == "check-config" and Path(argv[argv.index("-c") + 1]).is_file():
            pass  # a shipped config named by its repository path: checked as it is
        elif "-c" in argv:
            argv[argv.index("-c") + 1] = str(cfg)
        elif argv[0] != "completion":
            argv += ["-c", str(cfg)]
        code = main(argv)
        out = capsys.readouterr()
        if code != 0:
            failed.append(f"{line!r}: exit {code}: {out.err.strip()[-200:]}")
    assert failed == []


# ------------------------------------------------------------------ install recipes
UNITS = {p.stem for p in (ROOT / "deploy" / "systemd").glob("*.service")}
SYSTEMCTL = re.compile(
    r"systemctl (?:status|restart|start|stop|enable(?: --now)?|reload|kill|show(?: -p \S+)?) ([\w@.-]+)"
)


def python_sources() -> list[Path]:
    return sorted((ROOT / "vllm_guardian").rglob("*.py"))


@pytest.mark.parametrize("path", [*DOCS, *python_sources()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_unit_a_systemctl_line_names_for_the_guardian_is_the_shipped_unit(path):
    """The unit is deploy/systemd/guardian.service: a hint naming ``vllm-guardian`` sends a person
    at 3 a.m. to a unit that does not exist."""
    named = {m.group(1).removesuffix(".service") for m in SYSTEMCTL.finditer(text(path))}
    assert not {n for n in named if "guardian" in n} - UNITS, named


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_link_a_shell_recipe_makes_goes_into_a_folder_it_made_or_that_always_exists(path):
    """``ln -sf SRC DIR/NAME`` fails where DIR does not exist (zsh's site-functions often does not)."""
    for lang, body in blocks(path):
        if lang not in ("sh", "bash", "shell", "console", ""):
            continue
        made: set[str] = {"/usr/local/bin", "/usr/bin", "/etc"}  # on every Linux install
        for line in body.splitlines():
            words = line.split("#")[0].split()
            if words[:2] == ["mkdir", "-p"]:
                made |= set(words[2:])
            if words[:1] == ["ln"] and len(words) >= 3:
                folder = words[-1].rsplit("/", 1)[0]
                assert folder in made, f"{path.name}: `{line.strip()}` links into {folder}, never made first"

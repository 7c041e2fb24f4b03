"""Every subcommand given bad input fails as documented: a line a person can act on, one of the
exit codes of ``EXIT_CODES`` (docs/operate.md lists the same), never a Python traceback.

Most cases call ``main`` in-process (an exception escaping it would fail the test as surely as a
traceback); the port that is taken, the closed pipe and ``drain`` against a live control socket
run the real thing."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_guardian.errors import UnknownTarget
from vllm_guardian.cli.main import EXIT_CODES, main
from vllm_guardian.cli.parser import build_parser
from vllm_guardian.cli.help import subcommands
from vllm_guardian.surface.control_socket import ControlSocket

DOCS = Path(__file__).resolve().parents[2] / "docs"


def write_config(tmp_path: Path, **extra) -> str:
    cfg = {"state_dir": str(tmp_path / "state"), "api": {"http": None}, **extra}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: usage errors exit 2 after printing usage and one error line
        code = int(e.code or 0)
    return code, capsys.readouterr().err


# (argv with {cfg} for the config path, exit code, what the message must say)
BAD_INPUT = [
    (["run", "--bogus"], 2, "unrecognized arguments"),
    (["run", "-c", "{missing}"], 2, "no such file"),
    (["status", "-c", "{cfg}"], 1, "not reachable"),
    (["status", "--fleet", "-c", "{cfg}"], 1, "Redis at unix://"),
    (["healthz", "-c", "{cfg}"], 1, "not reachable"),
    (["check-config", "-c", "{badcfg}"], 2, "detectors.busy_loop.window"),
    (["probe", "-c", "{badcfg}"], 2, "detectors.busy_loop.window"),
    (["incidents", "show", "-c", "{cfg}"], 2, "needs an incident id"),
    (["incidents", "show", "../etc", "-c", "{cfg}"], 2, "not an incident id"),
    (["incidents", "show", "01JD3Q8Z7K4Y2X9W5V6T3R1P0N", "-c", "{cfg}"], 1, "no incident"),
    (["incidents", "list", "--limit", "many"], 2, "invalid int value"),
    (["drain", "nosuch", "-c", "{cfg}"], 1, "not reachable"),
    (["restart", "nosuch", "-c", "{cfg}"], 1, "not reachable"),
    (["undrain", "nosuch", "-c", "{cfg}"], 1, "not reachable"),
    (["maintenance", "sideways"], 2, "invalid choice"),
    (["workaround", "sideways"], 2, "invalid choice"),
    (["incidents", "list", "--html", "-c", "{cfg}"], 2, "incidents show ID --html"),
    (["maintenance", "on", "--for", "0", "-c", "{cfg}"], 2, "a duration must be"),
    (["alerts", "tail", "-c", "{cfg}"], 1, "the embedded Redis runs only while `guardian run` does"),
    (["alerts", "ack", "1-0", "-c", "{cfg}"], 2, "--group"),
    (["alerts", "ack", "1-0", "--group", "pager", "-c", "{cfg}"], 1, "Redis at unix://"),
    (["snapshot", "nosuch", "-c", "{cfg}"], 1, "no target named 'nosuch'"),
    (["demo", "--timeout", "soon"], 2, "invalid float value"),
    (["completion", "fish"], 2, "invalid choice"),
    (["fleet", "--hours", "soon"], 2, "invalid float value"),
]


def test_every_subcommand_has_a_bad_input_case():
    assert {argv[0] for argv, _, _ in BAD_INPUT} == set(subcommands(build_parser()))


@pytest.mark.parametrize("argv, code, says", BAD_INPUT, ids=[" ".join(a[:3]) for a, _, _ in BAD_INPUT])
def test_bad_input_fails_with_a_documented_code_and_a_message_that_says_what(tmp_path, capsys, argv, code, says):
    bad = tmp_path / "bad.yaml"
    bad.write_text("detectors:\n  busy_loop:\n    window: ten\n")
    paths = {"{cfg}": write_config(tmp_path), "{badcfg}": str(bad), "{missing}": str(tmp_path / "nope.yaml")}
    got, err = run_main([paths.get(a, a) for a in argv], capsys)
    assert (got, says in err, "Traceback" in err) == (code, True, False), err
    assert got in EXIT_CODES
    if not err.startswith("usage:"):  # argparse's own errors: the usage, then one line
        assert len(err.strip().splitlines()) == 1, err


def test_drain_of_a_target_the_daemon_does_not_know_says_so_plainly(tmp_path, capsys):
    def refuse(req):
        raise UnknownTarget(f"no target named {req['target']!r} on this node (known: llama; see `guardian status`)")

    sock = ControlSocket(str(tmp_path / "g.sock"), {"drain": refuse})
    sock.start()
    try:
        got, err = run_main(["drain", "nosuch", "--socket", sock.path, "-c", write_config(tmp_path)], capsys)
    finally:
        sock.stop()
    assert got == 1
    assert err.strip() == (
        "guardian drain nosuch: refused: no target named 'nosuch' on this node (known: llama; see `guardian status`)"
    )


def _guardian(*argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_guardian.cli.main", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def test_a_guardian_whose_http_port_is_taken_says_so_in_one_line_and_exits_3(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = write_config(tmp_path, api={"http": f"127.0.0.1:{port}"}, alerts={"redis_url": "redis://127.0.0.1:1/0"})
        res = _guardian("run", "-c", cfg)
    last = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr
    assert last.startswith(f"guardian: cannot listen on 127.0.0.1:{port} (api.http): ")
    assert "set api.http to a free port" in last


def test_output_into_a_closed_pipe_ends_quietly_with_141(tmp_path):
    """`guardian ... | head` once printed BrokenPipe tracebacks; here the reader is gone before the first line."""
    cfg = write_config(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = _guardian("check-config", "-c", cfg, stdout=write_end)
    finally:
        os.close(write_end)
    assert (res.returncode, res.stderr) == (141, "")


def test_the_exit_codes_documented_are_the_exit_codes_used():
    text = (DOCS / "operate.md").read_text()
    section = text.split("## Errors and exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert documented == set(EXIT_CODES)


def test_a_bad_log_level_in_the_environment_is_named_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDIAN_LOG_LEVEL", "loud")
    got, err = run_main(["run", "-c", write_config(tmp_path)], capsys)
    assert (got, err.strip()) == (
        2,
        "guardian: GUARDIAN_LOG_LEVEL=loud: expected one of debug, info, warning, error, critical",
    )
    assert not (tmp_path / "state" / "guardian.sock").exists()

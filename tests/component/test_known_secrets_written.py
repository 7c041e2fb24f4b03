"""A key the guardian holds never reaches a file it writes, even where nothing around it says
"secret": a server started with ``--api-key K`` whose stacks hold K in a local named ``k`` and in a
thread's name, and whose log prints K bare. The shape rules (redact.py) cannot see those;
the known-value scrubber (bundle/known_secrets.py) does, in every file of the state dir: the
incident, the evidence bundle (py-spy dumps, summary, manifest), the diagnosis and the report.
The daemon end to end on a fake /proc, HTTP and runner (tests/support/daemon_world.py)."""

from __future__ import annotations

import dataclasses
import json

from vllm_guardian.bundle.evidence import default_locate
from vllm_guardian.redact import redact_text
from vllm_guardian.host.api_keys import ApiKeys, BearerHttpClient
from vllm_guardian.host.http import HttpError
from vllm_guardian.model import Kind
from vllm_guardian.testing.fake_runner import result

from tests.support.daemon_world import API, ENGINE, World

SECRET = "Zq7Kx93hPlWm4Rt"  # no shape a pattern knows, and never beside a secret's name below
INPUT_TID = 111


def _dump() -> str:
    frame = {
        "name": "check_client",
        "filename": "/opt/venv/lib/python3.11/site-packages/app/auth.py",
        "module": None,
        "short_filename": "auth.py",
        "line": 12,
        "locals": [{"name": "k", "addr": 1, "arg": True, "repr": f"'{SECRET}'"}],
        "is_entry": False,
        "is_shim_entry": False,
    }
    thread = {
        "pid": ENGINE,
        "thread_id": 2,
        "thread_name": f"client-{SECRET}",
        "os_thread_id": INPUT_TID,
        "active": True,
        "owns_gil": True,
        "process_info": None,
        "frames": [frame],
    }
    return json.dumps([thread])


def _world(tmp_path) -> World:
    log = tmp_path / "vllm.log"
    log.write_text(f"(APIServer pid=100) WARNING 12-01 05:50:01 refused a client presenting {SECRET}\n")
    w = World(
        tmp_path,
        config={
            "autodiscover": False,
            "targets": [{"name": "llm", "match": {"cmdline_regex": "--port 8000"}, "log_path": str(log)}],
            "evidence": {"locals": True},
        },
    )
    w.d.runner.shutdown()
    argv = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000", "--api-key", SECRET)
    w.proc.add_process(API, 1, argv)
    keys = ApiKeys(w.cfg, w.seams.proc, environ={})  # the key from the server's command line
    w.seams = dataclasses.replace(w.seams, http=BearerHttpClient(w.http, keys))
    w.d = w.new_daemon()
    exe = default_locate("py-spy") or "py-spy"
    w.cmd.answer((exe, "dump", "--pid", str(ENGINE)), result(_dump()))
    return w


def _busy_loop(w: World) -> None:
    w.step(4)
    w.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    for _ in range(20):
        w.engine_ticks += 100
        w.proc.set_thread(ENGINE, INPUT_TID, utime=w.engine_ticks, state="R", syscall="running")
        if [t for t in w.step() if t.previous is None and t.incident.kind is Kind.BUSY_LOOP]:
            break
    w.step(3)  # evidence, then its diagnosis, off the loop


def test_a_key_the_guardian_holds_is_in_no_file_it_writes(tmp_path):
    """Defect E16: ``ApiKeys.secrets()`` existed, and nothing scrubbed with it."""
    w = _world(tmp_path)
    try:
        _busy_loop(w)
    finally:
        w.d.runner.shutdown()
    files = {
        p.relative_to(tmp_path): p.read_text(errors="replace")
        for p in tmp_path.joinpath("state").rglob("*")
        if p.is_file()
    }
    written = {str(p) for p in files}
    assert any(p.endswith("incident.json") for p in written)
    assert any("pyspy-" in p and p.endswith(".json") for p in written)
    assert any(p.endswith("summary.txt") for p in written) and any(p.endswith("report.html") for p in written)
    assert [str(p) for p, text in files.items() if SECRET in text] == []
    dump = next(text for p, text in files.items() if "pyspy-" in str(p) and str(p).endswith(".txt"))
    assert "client-<redacted>" in dump  # scrubbed where it stood, the rest of the line kept


def test_the_shape_rules_alone_would_have_kept_these(tmp_path):
    """What this file tests is beyond the patterns: each place the key stood passes them unchanged."""
    for text in (_dump(), f"refused a client presenting {SECRET}", f"client-{SECRET}"):
        assert SECRET in redact_text(text)

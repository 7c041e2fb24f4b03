"""Server log files their user controls, against a real ``guardian run`` beside the simulated vLLM.

The server's user (``nobody``, a real ``ln -s`` in the directory it owns) points both of its log
paths at root-only files: ``log_path`` (read for crash forensics) and ``restart.log_file`` (the
log of a restart as ``restart.user: nobody``). Then its engine dies.

What must hold: the engine_dead incident opens and its evidence and diagnosis are written, holding
no byte of either root-only file (the forensics say why the log was not read); the restart is
refused before anything is stopped and escalated (the server keeps its pid); both root-only
files are unchanged; each refusal is counted (``guardian status`` ``server_files`` and
``guardian_server_files_refused_total``); ``/healthz``, the target's readiness and ``guardian
status`` answer throughout.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from tests.chaos.chaos_util import needs_root
from tests.support.guardian_process import GuardianProcess, command_restart, fire, sweep
from tests.support.other_user import as_nobody, root_only, snapshot, users_dir, world_dir
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer, free_port

pytestmark = needs_root

MARKER = "guardian-test-secret"  # in both root-only files (tests.support.other_user.SECRET)


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def files_under(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file() and not p.is_symlink()]


def test_log_paths_linked_to_root_only_files_leak_nothing_and_start_nothing(tmp_path):
    port, http_port = free_port(), free_port()
    sim = SimServer(port=port, startup_delay=0.5).start()
    with world_dir() as world:
        logs = users_dir(world)
        secrets = tmp_path / "root-only"
        secrets.mkdir(mode=0o700)
        shadow, written = root_only(secrets, "shadow"), root_only(secrets, "written")
        as_nobody("ln", "-s", str(shadow), str(logs / "crash.log"))
        as_nobody("ln", "-s", str(written), str(logs / "server.log"))
        before = {p: snapshot(p) for p in (shadow, written)}
        target = command_restart(port, tmp_path, user="nobody", log_file=str(logs / "server.log"))
        target["log_path"] = str(logs / "crash.log")
        g = GuardianProcess(tmp_path, port, extra={"targets": [target], "api": {"http": f"127.0.0.1:{http_port}"}})
        base = f"http://127.0.0.1:{http_port}"
        try:
            sim.wait_ready(60)
            g.start()
            assert g.wait_ready(60), g.log_text()
            server_pid = g.require_target()["pid"]
            fire(sim, "die")
            inc = g.wait_incident("engine_dead", 60)
            assert inc is not None, g.log_text()
            diagnosis = poll(lambda: next(g.state_dir.glob(f"incidents/{inc['id']}/diagnosis.json"), None), 60)
            assert diagnosis is not None, g.log_text()
            crash = json.loads(diagnosis.read_text())["crash"]
            assert "not read" in crash["error"] and "symbolic link" in crash["error"], crash

            def refused_restart():
                i = next(i for i in g.incidents() if i["id"] == inc["id"])
                return next((a for a in i["actions"] if "restart.log_file" in a.get("detail", "")), None)

            action = poll(refused_restart, 30)
            assert action is not None and "symbolic link" in action["detail"], g.incidents()
            st = g.status() or {}
            refused = st.get("server_files", {}).get("refused", {})
            assert refused.get("log_path", 0) >= 1 and refused.get("restart.log_file", 0) >= 1, st.get("server_files")
            metrics = http_text(f"{base}/metrics")
            assert 'guardian_server_files_refused_total{setting="log_path"}' in metrics
            assert 'guardian_server_files_refused_total{setting="restart.log_file"}' in metrics
            assert http_status(f"{base}/healthz") == 200
            assert http_status(f"{base}/targets/sim/ready") in (200, 503)  # answers (503: engine dead)
            assert g.require_target()["pid"] == server_pid  # nothing was stopped
            assert {p: snapshot(p) for p in (shadow, written)} == before
            leaked = [p for p in files_under(g.state_dir) if MARKER in p.read_text(errors="replace")]
            assert leaked == []
            assert MARKER not in g.log_text() and "Traceback" not in g.log_text()
        finally:
            sim.stop()
            assert g.stop() == 0, g.log_text()
            sweep(port)

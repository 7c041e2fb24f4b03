"""A state dir another user made (mode 0777) holding a year-long maintenance switch of theirs, against
a real ``guardian run`` beside the simulated vLLM.

What must hold: the guardian refuses to start (exit 3) with one line naming the path, its owner and
mode, promptly, starting nothing (no lock, control socket or embedded Redis, the switch untouched
and unheeded); once the operator makes the directory the guardian's own and removes the
stranger's switch, the same command starts: status, ``/healthz`` and the target's readiness
answer, and no maintenance is in force.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

from tests.chaos.chaos_util import needs_root
from tests.support.guardian_process import GuardianProcess, sweep
from tests.support.other_user import NOBODY
from tests.support.redis_procs import kill_all, servers_for
from vllm_guardian.sim.control import SimServer, free_port

pytestmark = needs_root

YEAR = 365 * 86400


def test_a_state_dir_another_user_controls_stops_the_start_until_it_is_the_guardians_own(tmp_path):
    port, http_port = free_port(), free_port()
    g = GuardianProcess(tmp_path, port, extra={"api": {"http": f"127.0.0.1:{http_port}"}})
    state = g.state_dir
    state.mkdir()
    os.chown(state, NOBODY, NOBODY)
    state.chmod(0o777)
    switch = state / "maintenance.json"
    switch.write_text(json.dumps({"until": time.time() + YEAR}))
    os.chown(switch, NOBODY, NOBODY)
    planted = switch.read_bytes()
    sim = SimServer(port=port, startup_delay=0.5).start()
    try:
        sim.wait_ready(60)
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", str(g.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 3, out.stderr
        assert time.monotonic() - t0 < 30
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert f"state_dir {state} (owner uid {NOBODY} (nobody), mode 0777)" in lines[0]
        assert sorted(p.name for p in state.iterdir()) == ["maintenance.json"]  # no lock, socket, redis/
        assert switch.read_bytes() == planted and servers_for(state) == []

        # the operator makes it the guardian's own
        switch.unlink()
        os.chown(state, 0, 0)
        state.chmod(0o750)
        g.start()
        assert g.wait_ready(60), g.log_text()
        st = g.status()
        assert st is not None and st["maintenance_until"] is None
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/targets/sim/ready", timeout=5) as r:
            assert r.status == 200
    finally:
        sim.stop()
        assert g.stop() in (0, None), g.log_text()
        sweep(port)
        kill_all(servers_for(state))

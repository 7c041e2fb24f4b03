"""Eight "vLLM" servers that answer one byte at a time, beside a healthy one: the healthy one
becomes ready and keeps being probed, and the guardian still exits promptly on SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.guardian_process import GuardianProcess, sweep
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll

DRIPPERS = 8
ROOT = Path(__file__).resolve().parents[2]
DRIP = """
import sys, time
from tests.support.slow_drip import SlowDripServer
servers = [SlowDripServer(interval=0.5, duration=3600) for _ in range(int(sys.argv[1]))]
print(" ".join(str(s.port) for s in servers), flush=True)
time.sleep(3600)
"""


def test_slow_drip_servers_cannot_starve_the_healthy_target_or_block_shutdown(tmp_path):
    drips = [  # ``python -c`` imports from its working directory: the repository root
        subprocess.Popen([sys.executable, "-c", DRIP, "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(DRIPPERS)
    ]  # one process each: a target is a process tree
    ports = [int(d.stdout.readline()) for d in drips if d.stdout is not None]
    port = free_port()
    sim = SimServer(port=port, startup_delay=0.5).start()
    targets = [{"name": "sim", "match": {"port": port}}] + [
        {"name": f"drip{i}", "match": {"port": p}} for i, p in enumerate(ports)
    ]
    g = GuardianProcess(tmp_path, port, extra={"targets": targets})
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        assert poll(lambda: (st := g.status()) is not None and len(st["targets"]) == DRIPPERS + 1, 20), g.status()
        ages = []
        for _ in range(3):
            time.sleep(5)
            t = g.require_target()
            assert t["ready"] and t["canary"]["ok"], t
            ages.append(t["canary"]["age_s"])
        assert max(ages) < 30, ages  # canaries every 10 s keep coming
        t0 = time.monotonic()
        rc = g.stop()
        took = time.monotonic() - t0
        assert rc == 0 and took < 5.0, f"exit {rc} after {took:.1f}s\n{g.log_text()}"
    finally:
        g.stop()
        sim.stop()
        for drip in drips:
            drip.kill()
            drip.wait()
        sweep(port)

"""A server's HTTP answers as hostile input: one simulated vLLM whose /metrics names 20 000 engine
labels never seen before on every page, beside a healthy one, against a real ``guardian run`` that
could restart the flooded server (a command restart, remediate modes).

What must hold: the flood is bounded (the guardian's memory stays flat, no engine series is kept
for it) and counted (``metrics_dropped``), it causes no wrong action (no drain, stop or restart of
the flooded server: a refused page is a blind spot, alerted as ``probe_failure``, never a hang),
the guardian's ``/healthz`` and status answer throughout, and the healthy server is still judged
in time (its canary keeps coming; its engine's spin opens ``busy_loop``).
"""

from __future__ import annotations

import time

import psutil

from tests.support.guardian_process import GuardianProcess, command_restart, fire, sims_on, sweep
from tests.support.wait import poll
from tests.support.watcher import Watcher
from vllm_guardian.sim.control import SimServer, free_port

FLOOD = 20_000


def test_a_flood_of_engine_labels_is_bounded_counted_and_does_nothing_wrong(tmp_path):
    port, healthy_port, http_port = free_port(), free_port(), free_port()
    flooded = SimServer(port=port, startup_delay=0.5, extra_args=("--flood-engines", str(FLOOD))).start()
    healthy = SimServer(port=healthy_port, startup_delay=0.5).start()
    flood_target = dict(command_restart(port, tmp_path), name="flood")
    flood_target["restart"]["command"] += ["--flood-engines", str(FLOOD)]
    extra = {
        "targets": [flood_target, {"name": "sim", "match": {"port": healthy_port}}],
        "api": {"http": f"127.0.0.1:{http_port}"},
        "detectors": {"busy_loop": {"mode": "remediate"}, "engine_stall": {"mode": "remediate"}},
    }
    g = GuardianProcess(tmp_path, healthy_port, extra=extra)
    try:
        flooded.wait_ready(60)
        healthy.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        assert g.wait_ready(60, name="flood"), g.log_text()
        assert g.proc is not None
        guardian = psutil.Process(g.proc.pid)
        rss0 = guardian.memory_info().rss
        with Watcher(g, f"http://127.0.0.1:{http_port}/healthz") as watch:
            counted = poll(
                lambda: (g.target("flood") or {}).get("metrics_dropped", {}).get("too_many_samples", 0) >= 30, 90
            )
            assert counted, g.target("flood")
            ages = []
            for _ in range(3):
                time.sleep(5)  # the scenario's pace, not an assertion: its canary is read every 5 s
                ages.append(g.require_target("sim")["canary"]["age_s"])
            onset = fire(healthy, "busy_loop")
            inc = g.wait_incident("busy_loop", timeout=60)
        rss1 = guardian.memory_info().rss

        assert inc is not None and inc["target"]["name"] == "sim", g.log_text()
        print(f"\nbusy_loop on the healthy server beside the flood: {inc['opened_at'] - onset:.1f}s")
        assert max(ages) < 30, ages  # its canary every 10 s kept coming
        assert watch.checks >= 10 and watch.failures == [], watch.failures[:5]
        assert rss1 - rss0 < 50 * 2**20, (rss0, rss1)  # flat: before the bound it grew ~200 MiB a minute
        flood = g.require_target("flood")
        assert flood["metrics_dropped"]["too_many_samples"] >= 30
        assert "/metrics page refused" in flood["errors"].get("flood:metrics", ""), flood["errors"]
        assert g.log_text().count("flood:metrics: /metrics page refused") == 1  # said once, counted every time
        # no wrong action: the flooded server is the one started, nothing drained, stopped or restarted
        assert sims_on(port) == [flooded.pid]
        for i in g.incidents():
            if i["target"]["name"] == "flood":
                assert i["kind"] == "probe_failure", i
                assert not [a for a in i["actions"] if a["name"] in ("drain", "stop", "start", "restart")], i
    finally:
        g.stop()
        flooded.stop()
        healthy.stop()
        sweep(port)
        sweep(healthy_port)

"""The guardian SIGKILLed in a phase of a restart (command mode, a real simulated vLLM, a real
Redis for alerts and the fleet lease) and started again: the sequence goes on from where it
was, the server is never started twice, the fleet lease is released, the incident ends."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from guardian.testing.redis_server import RedisServer

from guardian_world import GuardianProcess, SimServer, command_restart, free_port, poll, sims_on, sweep


def trip(sim: SimServer, fault: str) -> None:
    sim.set_fault(fault)

    def request():
        try:
            sim.complete("x", max_tokens=4, timeout=60)
        except Exception:  # noqa: BLE001 - the engine spins: the request never ends well
            pass

    threading.Thread(target=request, daemon=True).start()


def phase_of(g: GuardianProcess) -> str | None:
    t = g.target()
    return (t.get("remediation") or {}).get("phase") if t else None


@pytest.mark.parametrize(
    "phase, fault",
    [
        ("draining", "busy_loop"),
        ("starting", "die"),  # an engine death: the owner gets a grace before the guardian starts a copy
        ("verifying", "busy_loop"),
    ],
)
def test_a_guardian_killed_mid_restart_finishes_it_once_after_its_restart(tmp_path, phase, fault):
    port = free_port()
    redis = RedisServer(durable=True).start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    target = command_restart(port, tmp_path, owner_grace=4)
    target["restart"]["command"] = target["restart"]["command"][:-1] + ["4"]  # the copy loads for 4 s
    g = GuardianProcess(tmp_path, port, extra={"targets": [target], "alerts": {"redis_url": redis.url}})
    starts_seen: set[int] = set()
    watching = threading.Event()

    def watch():
        while not watching.is_set():
            starts_seen.update(sims_on(port))
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        trip(sim, fault)
        assert poll(lambda: phase_of(g) == phase, 90, every=0.1), g.log_text()
        assert g.proc is not None
        os.kill(g.proc.pid, signal.SIGKILL)
        g.proc.wait()
        g.start()
        done = poll(
            lambda: (t := g.target()) and (t.get("remediation") or {}).get("outcome") == "done" and t["serving"] and t,
            120,
        )
        assert done, g.log_text()
        kind = "busy_loop" if fault == "busy_loop" else "engine_dead"
        inc = poll(
            lambda: next((i for i in g.incidents() if i["kind"] == kind and i["status"] == "resolved"), None), 60
        )
        assert inc is not None, g.log_text()
        assert len(sims_on(port)) == 1  # exactly one server serves the port
        assert len(starts_seen - {sim.pid}) == 1, starts_seen  # the guardian started one copy, once
        assert poll(lambda: not redis.client().keys("guardian:lease:*"), 10)  # the fleet lease is free
    finally:
        watching.set()
        sim.stop()
        g.stop()
        redis.stop()
        sweep(port)

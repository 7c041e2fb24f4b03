"""The guardian SIGKILLed in a phase of a restart (command mode, a real simulated vLLM, a real
Redis for alerts and the fleet lease) and started again: the sequence goes on from where it
was, the server is never started twice, the fleet lease is released, the incident ends.

A hung engine has nothing to drain (its restart passes through ``draining`` within a tick), so
the draining phase is caught on a fault whose engine still serves: garbage answers under load
(``output_corruption`` in remediate mode), where the drain waits for requests in flight."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from vllm_guardian.sim.control import LoadGenerator
from vllm_guardian.testing.redis_server import RedisServer

from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll


KIND = {"busy_loop": "busy_loop", "die": "engine_dead", "repeat_chars": "output_corruption"}

# garbage answers caught by the gates: a round a second, one sample for the baseline, remediated
GATES = {
    "gates": {"enabled": True, "interval": 1.0, "baseline_samples": 1},
    "detectors": {"output_corruption": {"mode": "remediate"}},
}


def trip(sim: SimServer, fault: str) -> None:
    sim.set_fault(fault)
    if fault == "repeat_chars":
        return  # the server goes on serving: the load keeps requests in flight

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
        ("draining", "repeat_chars"),  # requests in flight: the drain waits for them (drain timeout 30 s)
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
    extra: dict = {"targets": [target], "alerts": {"redis_url": redis.url}}
    load: LoadGenerator | None = None
    if fault == "repeat_chars":
        target["drain"] = {"timeout": 30}
        extra.update(GATES)
    g = GuardianProcess(tmp_path, port, extra=extra)
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
        if fault == "repeat_chars":
            baseline = poll(lambda: ((g.target() or {}).get("gates") or {}).get("baseline") == "complete", 60)
            assert baseline, g.log_text()
            # two clients, 200-400 tokens each (1-2 s at the server's 5 ms a step): never empty
            load = LoadGenerator(sim.url, sim.model, clients=2, max_tokens=(200, 400)).start()
        trip(sim, fault)
        assert poll(lambda: phase_of(g) == phase, 90, every=0.1), g.log_text()
        assert g.proc is not None
        os.kill(g.proc.pid, signal.SIGKILL)
        g.proc.wait()
        if load is not None:
            load.stop(5)  # the restarted guardian finds the drain empty or waits out its timeout
        g.start()
        done = poll(
            lambda: (t := g.target()) and (t.get("remediation") or {}).get("outcome") == "done" and t["serving"] and t,
            120,
        )
        assert done, g.log_text()
        kind = KIND[fault]
        inc = poll(
            lambda: next((i for i in g.incidents() if i["kind"] == kind and i["status"] == "resolved"), None), 60
        )
        assert inc is not None, g.log_text()
        assert len(sims_on(port)) == 1  # exactly one server serves the port
        assert len(starts_seen - {sim.pid}) == 1, starts_seen  # the guardian started one copy, once
        # the fleet lease is free: no slot held (the fence counter stays: tokens only grow)
        assert poll(lambda: not [k for k in redis.client().keys("guardian:lease:*") if not k.endswith(":fence")], 10)
    finally:
        if load is not None:
            load.stop(5)
        watching.set()
        sim.stop()
        g.stop()
        redis.stop()
        sweep(port)

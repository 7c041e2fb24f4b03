"""A data-parallel real vLLM (``--data-parallel-size 2``): a hang in one rank while the other serves.

Shared by ``make bench`` (``run.py --dp-runs``) and the e2e suite (``tests/e2e/test_real_vllm_dp.py``).
One run: a fresh ``guardian run --dry-run`` on the server, 4 clients of load over both ranks, then
the fault plugin's trigger with ``dp_rank=<k>`` (the hang starts in ``EngineCore_DP<k>`` only);
onset = the plugin's onset marker (the moment the hang began inside that engine: with load running,
its next step); detected = the incident of the expected kind opened. The load goes on meanwhile:
the other rank serves it (counted). The fault is then cleared and the server must serve again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DP_ARGS = ("--data-parallel-size", "2")
DP_FAULTS = (("busy_loop", "busy_loop"), ("stall", "engine_stall"))  # (plugin trigger, incident kind)


@dataclass(frozen=True)
class RankRun:
    fault: str
    kind: str
    rank: int  # the rank the hang was injected in
    onset_to_incident_s: float | None  # None: not detected before the deadline
    incidents: tuple[str, ...] = ()  # kinds open when the run was judged
    signals: dict[str, Any] = field(default_factory=dict)  # the incident's rank, process, reason
    fault_pid: int | None = None  # the engine the hang started in (the plugin's marker)
    served_meanwhile: int = 0  # completions the server answered between onset and incident


def rank_hang_run(
    h, server, work: Path, fault: str, kind: str, rank: int = 1, detect_timeout: float = 120.0, say: Callable = print
) -> RankRun:
    """One hang in rank ``rank`` of a running DP server (``h``: the e2e harness module)."""
    from vllm_guardian.sim.control import LoadGenerator

    g = h.GuardianRun(work, server.port).start()
    switch = h.FaultSwitch(server.fault_dir)
    try:
        if not g.wait_ready(180):
            raise RuntimeError(f"guardian never saw the server ready:\n{g.log_text()}")
        load = LoadGenerator(
            server.url, server.model, clients=4, max_tokens=(1, 32), request_timeout=600, max_duration=600
        ).start()
        try:
            time.sleep(3.0)  # both ranks busy
            switch.on(fault, f"dp_rank={rank}")
            marker = h.poll(lambda: switch.onset(fault), 60, every=0.05)
            if marker is None:
                raise RuntimeError(f"{fault} never started in rank {rank}:\n{server.log_tail()}")
            before = load.ok
            inc = g.wait_incident(kind, detect_timeout)
            served = load.ok - before
        finally:
            load.stop(timeout=0.1)  # clients stuck on the hung rank finish once it is cleared
        kinds = tuple(i["kind"] for i in g.incidents())
    finally:
        g.stop()
        switch.clear(fault)
    if not h.poll(lambda: server.serves(timeout=30), 180, every=1.0):
        raise RuntimeError(f"vLLM did not recover from {fault} in rank {rank}:\n{server.log_tail()}")
    sig = {} if inc is None else {k: inc["signals"].get(k) for k in ("dp_rank", "process_title", "pid", "reason")}
    run = RankRun(
        fault=fault,
        kind=kind,
        rank=rank,
        onset_to_incident_s=None if inc is None else inc["opened_at"] - marker["t"],
        incidents=kinds,
        signals=sig,
        fault_pid=marker.get("pid"),
        served_meanwhile=served,
    )
    shown = "MISSED" if run.onset_to_incident_s is None else f"{run.onset_to_incident_s:.1f} s"
    say(f"DP=2 {fault} in rank {rank}: {kind} after {shown} {sig}; {served} served meanwhile; open {list(kinds)}")
    return run


def named_right(run: RankRun) -> bool:
    """The incident names the rank the hang was in, and its engine process."""
    return run.signals.get("dp_rank") == run.rank and run.signals.get("pid") == run.fault_pid

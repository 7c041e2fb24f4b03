"""The gates against a real vLLM, for the benchmark: corruption switched on inside vLLM (the fault
plugin's ``logits_nan`` / ``logits_noise``), onset → ``output_corruption``, and what one gate
round costs the server (``vllm_guardian.gates.cost`` at the defaults, from measured round times).

One guardian with gates on (a round every ``interval`` s; the tiny random model cannot answer
"1+1=", so its diagnostic expects the baseline) takes its baseline on the healthy server, then
each fault is switched on, judged, cleared, and the incident must resolve before the next.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Callable

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates.cost import cost, requests_per_round
from vllm_guardian.gates.perplexity import BUILTIN_REFERENCE

from .report_gates import GATE_FAULTS, GateCostRow, GateRun, GatesSection

DIAGNOSTIC = {"prompt": "1+1=", "expect": "baseline", "max_tokens": 4}


def _gates(g) -> dict:
    return (g.target() or {}).get("gates") or {}


def measure_cost(h, server, rounds: int = 5) -> GateCostRow:
    """Round time at the defaults, measured on the idle server; the hourly figures from it."""
    defaults = GatesConfig()
    prompts = tuple((d.prompt, d.max_tokens) for d in defaults.diagnostics) + tuple(
        (p, defaults.shadow_max_tokens) for p in defaults.shadow_prompts
    )
    times = tuple(h.gate_round_seconds(server, prompts, BUILTIN_REFERENCE) for _ in range(rounds))
    c = cost(defaults, statistics.median(times))
    return GateCostRow(
        interval_s=defaults.interval,
        requests_per_round=requests_per_round(defaults),
        round_server_s=times,
        requests_per_hour=c.requests_per_hour,
        server_seconds_per_hour=c.server_seconds_per_hour,
        share_of_capacity=c.share_of_capacity,
    )


def one_fault(h, g, switch, fault: str, timeout: float, phase: float = 0.0) -> GateRun:
    time.sleep(phase)  # the corruption's onset owes nothing to the gates' round schedule
    switched = time.time()
    switch.on(fault)
    inc = h.poll(
        lambda: next(
            (i for i in g.incidents() if i["kind"] == "output_corruption" and i["opened_at"] >= switched - 1), None
        ),
        timeout,
        every=0.5,
    )
    onset = h.poll(lambda: switch.onset(fault), 30)
    others = tuple(
        sorted({i["kind"] for i in g.incidents() if i["opened_at"] >= switched and i["kind"] != "output_corruption"})
    )
    switch.clear(fault)
    cleared = time.time()
    if inc is None or onset is None:
        return GateRun(fault, None, other_incidents=others)
    done = h.poll(
        lambda: next((i for i in g.incidents() if i["id"] == inc["id"] and i["status"] == "resolved"), None),
        timeout,
        every=1.0,
    )
    sig = inc.get("signals") or {}
    return GateRun(
        fault,
        inc["opened_at"] - switched,
        first_answer_to_incident_s=inc["opened_at"] - onset["t"],
        condition=sig.get("condition"),
        level=sig.get("level"),
        resolved_after_clear_s=None if done is None else done["resolved_at"] - cleared,
        other_incidents=others,
    )


def gate_section(
    h,
    server,
    work: Path,
    runs: int,
    interval: float,
    say: Callable[[str], None],
    timeout: float = 240.0,
    seed: int = 0,
) -> GatesSection:
    row = measure_cost(h, server)
    say(f"gates cost: {100 * row.share_of_capacity:.3f} % of the server at the defaults")
    g = h.GuardianRun(
        work, server.port, extra={"gates": {"enabled": True, "interval": interval, "diagnostics": [DIAGNOSTIC]}}
    )
    g.start()
    try:
        if not g.wait_ready(180):
            raise RuntimeError(f"guardian never saw the server ready:\n{g.log_text()}")
        if not h.poll(lambda: _gates(g).get("baseline") == "complete", 180):
            raise RuntimeError(f"no gate baseline: {_gates(g)}\n{g.log_text()}")
        healthy = _gates(g)
        switch = h.FaultSwitch(server.fault_dir)
        out: list[GateRun] = []
        rng = random.Random(seed)
        for i in range(runs):
            for fault, _ in GATE_FAULTS:
                run = one_fault(h, g, switch, fault, timeout, phase=rng.uniform(0.0, interval))
                out.append(run)
                shown = "MISSED" if run.onset_to_incident_s is None else f"{run.onset_to_incident_s:.1f} s"
                say(f"{fault} #{i + 1}: output_corruption after {shown} ({run.condition}/{run.level})")
        return GatesSection(
            interval_s=interval,
            runs=tuple(out),
            cost=row,
            false_rounds=int(healthy.get("failed_rounds", 0)),
            healthy_rounds=int(healthy.get("rounds", 0)),
        )
    finally:
        g.stop()

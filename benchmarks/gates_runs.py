"""The gates against a real vLLM, for the benchmark: corruption switched on inside vLLM (the fault
plugin's ``logits_nan`` / ``logits_noise``), onset → ``output_corruption``, and what one gate
round costs the server (``vllm_guardian.gates.cost`` at the defaults, from measured round times).

One guardian with gates on (a round every ``interval`` s; the tiny random model cannot answer
"1+1=", so its diagnostic expects the baseline) takes its baseline on the healthy server, then
each fault is switched on, judged, cleared, and the incident must resolve before the next.

Fluent but wrong (``fluent_section``): the plugin's ``logits_permute`` rotates the model's
whole-word tokens by one place. Two guardians watch the server at once — the defaults (a
round every 60 s) and one with user diagnostics — and each run switches the fault on at a
random phase of their schedules, waits for both incidents, clears it and waits for both to
resolve.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates.cost import cost, requests_per_round
from vllm_guardian.gates.known_answers import diagnostics_of
from vllm_guardian.gates.perplexity import BUILTIN_REFERENCE

from .report_gates import GATE_FAULTS, FluentConfig, FluentSection, GateCostRow, GateRun, GatesSection

DIAGNOSTIC: dict[str, Any] = {"prompt": "1+1=", "expect": "baseline", "max_tokens": 4}


def _gates(g) -> dict:
    return (g.target() or {}).get("gates") or {}


def measure_cost(h, server, rounds: int = 5) -> GateCostRow:
    """Round time at the defaults, measured on the idle server; the hourly figures from it."""
    defaults = GatesConfig()
    prompts = tuple((d.prompt, d.max_tokens) for d in diagnostics_of(defaults)) + tuple(
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
        confirmations_per_episode=c.confirmations_per_episode,
        confirmation_server_s=c.confirmation_server_seconds,
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


FLUENT = "logits_permute"
DEFAULT_INTERVAL = GatesConfig().interval
USER_INTERVAL = 30.0
# what a user who knows the model would configure: prompts whose answers they know (the random
# test model knows nothing, so each expects its own healthy answer)
USER_DIAGNOSTICS: tuple[dict[str, Any], ...] = tuple(
    {"prompt": p, "expect": "baseline", "max_tokens": 8}
    for p in (
        "The guardian watches the",
        "The quick brown fox jumps over the",
        "Tell me a story about the",
        "Every request is scheduled, executed and",
    )
)


def whole_word_ids(h, model_dir: Path) -> list[int]:
    """The model's whole-word token ids, as the fault plugin picks them (its module, from its folder)."""
    import json

    from tests.e2e.vllm_fault_plugin import guardian_vllm_fault_plugin as fp

    return list(fp.whole_word_ids(json.loads((model_dir / "tokenizer.json").read_text())))


def _incident_after(g, since: float):
    return next((i for i in g.incidents() if i["kind"] == "output_corruption" and i["opened_at"] >= since - 1), None)


def fluent_section(h, server, work: Path, runs: int, say: Callable[[str], None], seed: int = 0) -> FluentSection:
    ids = whole_word_ids(h, server.model_dir)
    configs: dict[str, tuple[float, list[dict[str, Any]]]] = {
        "defaults": (DEFAULT_INTERVAL, [DIAGNOSTIC]),
        "user diagnostics": (USER_INTERVAL, [DIAGNOSTIC, *USER_DIAGNOSTICS]),
    }
    guardians = {
        label: h.GuardianRun(
            work / label.replace(" ", "-"),
            server.port,
            extra={"gates": {"enabled": True, "interval": iv, "diagnostics": diags}},
        )
        for label, (iv, diags) in configs.items()
    }
    for g in guardians.values():
        g.start()
    try:
        for label, g in guardians.items():
            if not g.wait_ready(180):
                raise RuntimeError(f"guardian {label} never saw the server ready:\n{g.log_text()}")
        for label, g in guardians.items():  # the first round takes the answers' baseline
            if not h.poll(lambda g=g: _gates(g).get("rounds", 0) >= 2, 2 * configs[label][0] + 60, every=1.0):
                raise RuntimeError(f"no gate rounds for {label}: {_gates(g)}\n{g.log_text()}")
        healthy = {label: _gates(g) for label, g in guardians.items()}
        switch = h.FaultSwitch(server.fault_dir)
        rng = random.Random(seed + 1)
        out: list[GateRun] = []
        for i in range(runs):
            time.sleep(rng.uniform(0.0, DEFAULT_INTERVAL))
            switched = time.time()
            switch.on(FLUENT, " ".join(map(str, ids)))

            def both(since: float = switched) -> dict | None:
                got = {label: _incident_after(g, since) for label, g in guardians.items()}
                return got if all(got.values()) else None

            incs = h.poll(both, DEFAULT_INTERVAL + 90, every=0.5) or {
                label: _incident_after(g, switched) for label, g in guardians.items()
            }
            onset = h.poll(lambda: switch.onset(FLUENT), 30)
            after = {label: _gates(g) for label, g in guardians.items()}
            switch.clear(FLUENT)
            cleared = time.time()
            for label, g in guardians.items():
                inc = incs.get(label)
                done = None
                if inc is not None:
                    done = h.poll(
                        lambda g=g, inc=inc: next(
                            (x for x in g.incidents() if x["id"] == inc["id"] and x["status"] == "resolved"), None
                        ),
                        DEFAULT_INTERVAL + 60,
                        every=1.0,
                    )
                sig = (inc or {}).get("signals") or {}
                run = GateRun(
                    FLUENT,
                    None if inc is None else inc["opened_at"] - switched,
                    first_answer_to_incident_s=None if inc is None or onset is None else inc["opened_at"] - onset["t"],
                    condition=sig.get("condition"),
                    level=sig.get("level"),
                    resolved_after_clear_s=None if done is None else done["resolved_at"] - cleared,
                    config=label,
                    confirmation_rounds=int(after[label].get("confirmation_rounds", 0)),
                )
                out.append(run)
                shown = "MISSED" if run.onset_to_incident_s is None else f"{run.onset_to_incident_s:.1f} s"
                say(f"fluent wrong #{i + 1}, {label}: output_corruption after {shown} ({run.condition}/{run.level})")
        return FluentSection(
            tuple(
                FluentConfig(
                    label,
                    configs[label][0],
                    tuple(d["prompt"] for d in configs[label][1]),
                    int(healthy[label].get("rounds", 0)),
                    int(healthy[label].get("failed_rounds", 0)),
                )
                for label in guardians
            ),
            tuple(out),
            len(ids),
        )
    finally:
        for g in guardians.values():
            g.stop()


def gate_section(
    h,
    server,
    work: Path,
    runs: int,
    interval: float,
    say: Callable[[str], None],
    timeout: float = 240.0,
    seed: int = 0,
    fluent_runs: int = 0,
) -> GatesSection:
    row = measure_cost(h, server)
    say(f"gates cost: {100 * row.share_of_capacity:.3f} % of the server at the defaults")
    fluent = fluent_section(h, server, work / "fluent", fluent_runs, say, seed) if fluent_runs else None
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
            fluent=fluent,
        )
    finally:
        g.stop()

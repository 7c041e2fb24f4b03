"""The benchmark's arithmetic and table, and the liveness-probe verdict, on literal data."""

from __future__ import annotations

import pytest

from benchmarks.report import (
    FaultRun,
    Negative,
    Overhead,
    ProbeCost,
    Report,
    cpu_percent,
    parse_stat_cpu_ticks,
    parse_vmrss,
    probe_costs,
    render_markdown,
    summarize,
)
from tests.e2e.harness import Probe, liveness_fired_at

STAT = (
    "4242 (py thon) (x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 25 0 0 20 0 3 0 208880 1000 200 18446744073709551615"
)


def test_parse_stat_cpu_ticks_sums_utime_and_stime_after_a_tricky_comm():
    assert parse_stat_cpu_ticks(STAT) == 175


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Name:\tguardian\nVmPeak:\t  9000 kB\nVmRSS:\t   51200 kB\n", 51200 * 1024),
        ("Name:\tkthreadd\nState:\tS (sleeping)\n", None),
    ],
)
def test_parse_vmrss(text, expected):
    assert parse_vmrss(text) == expected


def test_cpu_percent_is_of_one_core():
    assert cpu_percent(100, 700, 60.0, 100) == pytest.approx(10.0)


def test_cpu_percent_rejects_an_empty_interval():
    with pytest.raises(ValueError):
        cpu_percent(0, 1, 0.0, 100)


@pytest.mark.parametrize(
    "values, n, median, top", [([], 0, None, None), ([3.0, 1.0, 2.0], 3, 2.0, 3.0), ([4.0, 1.0], 2, 2.5, 4.0)]
)
def test_summarize(values, n, median, top):
    s = summarize(values)
    assert (s.n, s.median, s.max) == (n, median, top)


@pytest.mark.parametrize(
    "statuses, fired",
    [
        ([200, 200, 200, 200], None),
        ([None, None, 200, None, None], None),  # never 3 in a row
        ([200, 503, None, 500, 200], 3.0),  # the 3rd consecutive failure, sent at t=3
        ([301, 302, 200], None),  # a kubelet counts 2xx and 3xx as success
        ([None, None, None, None], 2.0),
    ],
)
def test_liveness_fires_at_the_third_consecutive_failure(statuses, fired):
    probes = [Probe(float(t), s) for t, s in enumerate(statuses)]
    assert liveness_fired_at(probes, threshold=3) == fired


def _report() -> Report:
    runs = (
        FaultRun("busy_loop", "busy_loop", 9.0, ("busy_loop",), ("engine_stall",), 4, 0, None, 40.0),
        FaultRun("busy_loop", "busy_loop", None, (), (), 4, 0, None, 40.0),
        FaultRun("die", "engine_dead", 1.3, ("engine_dead",), (), 4, 3, 21.0, 40.0),
    )
    overhead = Overhead(
        60.0,
        1.5,
        50 << 20,
        52 << 20,
        0.2,
        60,
        0.002,
        0.05,
        (ProbeCost("procfs", 60, 0.003), ProbeCost("canary", 6, 0.0)),
    )
    return Report(
        3,
        "0.32.0",
        "2 CPUs",
        600.0,
        (80.0, 90.0),
        runs,
        (
            Negative("idle", 60.0, ()),
            Negative("sustained load", 60.0, ("busy_loop",), "10 completions"),
            Negative("warm-up", 80.0, ()),
            Negative("warm-up", 90.0, ("engine_dead",)),
        ),
        overhead,
        notes=("a note",),
    )


def test_table_shows_detections_misses_and_misclassifications():
    text = render_markdown(_report())
    busy = next(line for line in text.splitlines() if line.startswith("| busy loop"))
    assert "| 1/2 |" in busy and "9.0, miss" in busy
    assert "engine_stall (0 during, 1 after clear)" in busy
    assert "never fired: 0 failures in 8 probes over 2 runs" in busy


def test_table_shows_when_the_liveness_probe_fired_for_a_death():
    death = next(line for line in render_markdown(_report()).splitlines() if line.startswith("| EngineCore os._exit"))
    assert "fired in 1/1 runs, 21.0 s median" in death


def test_table_counts_false_positives_and_overhead():
    text = render_markdown(_report())
    assert "| idle | 60 s | 0 |" in text
    assert "| sustained load (10 completions) | 60 s | 1: busy_loop |" in text
    assert "CPU 1.50 % of one core" in text and "RSS 50.0 MiB mean / 52.0 MiB max" in text
    assert "| procfs | 60 | 3.00 ms | 3.00 ms |" in text
    assert "- a note" in text


def test_faults_without_runs_are_left_out():
    text = render_markdown(_report())
    assert "blocked on a lock" not in text


def test_repeated_negative_scenarios_share_one_row():
    assert "| warm-up | 2 runs, 80–90 s each | 1: engine_dead |" in render_markdown(_report())


def test_probe_costs_are_the_runs_between_two_status_snapshots():
    before = {"procfs": {"runs": 10, "mean_duration_s": 0.1}, "canary": {"runs": 0, "mean_duration_s": 0.0}}
    after = {
        "procfs": {"runs": 30, "mean_duration_s": 0.04},
        "canary": {"runs": 2, "mean_duration_s": 0.05},
        "accel": {"runs": 0, "mean_duration_s": 0.0},
    }
    costs = {c.name: (c.runs, round(c.mean_duration_s, 6)) for c in probe_costs(before, after)}
    assert costs == {"procfs": (20, 0.01), "canary": (2, 0.05), "accel": (0, 0.0)}


# ---------------------------------------------------------------- gates and restarts sections
def _gates_report(runs, cost=None):
    from benchmarks.report_gates import GatesSection

    return Report(
        runs=1,
        vllm_version="0.32.0",
        host="2 CPUs",
        wall_s=60.0,
        server_starts_s=(),
        fault_runs=(),
        negatives=(),
        overhead=None,
        gates=GatesSection(interval_s=10.0, runs=tuple(runs), cost=cost, false_rounds=0, healthy_rounds=12),
    )


def test_the_gates_row_gives_median_max_each_run_and_the_conditions():
    from benchmarks.report_gates import GateRun

    runs = [
        GateRun("logits_nan", 4.0, 1.0, "B", "L3", 12.0),
        GateRun("logits_nan", 9.0, 2.0, "B", "L3", 15.0),
        GateRun("logits_nan", None),
    ]
    text = render_markdown(_gates_report(runs))
    row = next(line for line in text.splitlines() if "`logits_nan`" in line)
    assert "| 2/3 | 6.5 s | 9.0 s | 4.0, 9.0, miss | 1.5 s | B/L3 | 2/3, 15.0 s max | none |" in row
    assert "12 gate rounds, 0 failed" in text


def test_the_gates_cost_line_says_requests_server_seconds_and_share_of_capacity():
    from benchmarks.report_gates import GateCostRow

    cost = GateCostRow(60.0, 5, (0.2, 0.3, 0.25), 300.0, 15.0, 15.0 / 3600)
    text = render_markdown(_gates_report([], cost))
    assert "300 requests and 15.0 server-seconds per hour, 0.417 % of one server's capacity" in text
    assert "median 250 ms, max 300 ms" in text


def test_the_restart_row_gives_each_phase_and_the_guardians_share():
    from benchmarks.report_restart import RestartRun

    phases: dict[str, float | None] = {
        "detection": 9.0,
        "evidence": 3.0,
        "drain": 0.0,
        "stop": 3.5,
        "release": 0.1,
        "start": 1.0,
        "ready": 60.0,
        "open_to_start": 4.6,
        "onset_to_serving": 74.6,
    }
    r = Report(
        1,
        "0.32.0",
        "2 CPUs",
        60.0,
        (),
        (),
        (),
        None,
        restarts=(RestartRun("busy_loop", "busy_loop", 70.0, phases, "verifying ok"),),
    )
    row = next(line for line in render_markdown(r).splitlines() if line.startswith("| busy_loop"))
    assert row == (
        "| busy_loop | `busy_loop` | 9.0 | 3.0 | 0.0 | 3.5 | 0.1 | 1.0 | 60.0 "
        "| 4.6 | 74.6 | 70.0 | 13.6 | verifying ok |"
    )


def test_the_fluent_wrong_table_has_one_row_per_guardian_config():
    from benchmarks.report_gates import FluentConfig, FluentSection, GateRun, render_fluent

    runs = [
        GateRun("logits_permute", 30.0, condition="D", level="L5", resolved_after_clear_s=5.0, config="defaults"),
        GateRun("logits_permute", 50.0, condition="D", level="L5", resolved_after_clear_s=61.0, config="defaults"),
        GateRun("logits_permute", None, config="user diagnostics"),
    ]
    configs = (
        FluentConfig("defaults", 60.0, ("1+1=",), 2, 0),
        FluentConfig("user diagnostics", 30.0, ("a", "b"), 3, 1),
    )
    text = "\n".join(render_fluent(FluentSection(configs, tuple(runs), 41)))
    assert "41 whole-word tokens" in text
    assert (
        "| defaults (1 configured diagnostic(s) + the built-in checks) | 60 s | 2/2 | 40.0 s | 50.0 s | 30.0, 50.0 |"
        in text
    )
    assert "| D/L5 | 2/2, 61.0 s max | 2 (0) |" in text
    assert (
        "| user diagnostics (2 configured diagnostic(s) + the built-in checks) | 30 s | 0/1 |" in text
        and "| 3 (1) |" in text
    )


def test_the_data_parallel_table_shows_detections_the_named_rank_and_the_other_ranks_service():
    from benchmarks.dp_runs import RankRun
    from benchmarks.report_dp import render_dp

    sig = {"dp_rank": 1, "pid": 42, "process_title": "VLLM::EngineCore_DP1", "reason": "canary_timeout"}
    runs = (
        RankRun("busy_loop", "busy_loop", 1, 8.0, ("busy_loop",), sig, 42, 30),
        RankRun("busy_loop", "busy_loop", 1, 12.0, ("busy_loop",), dict(sig, dp_rank=0), 42, 25),
        RankRun("busy_loop", "busy_loop", 1, None, ("engine_stall",), {}, 42, 40),
    )
    text = "\n".join(render_dp(runs, start_s=240.0))
    row = next(line for line in text.splitlines() if line.startswith("| busy loop in one rank"))
    assert "| 2/3 | 10.0 s | 12.0 s | 8.0, 12.0, miss | 1/3 | canary_timeout | 30, 25, 40 | engine_stall |" in row
    assert "240.0 s" in text
    assert "blocked on a lock" not in text  # no stall runs: no stall row

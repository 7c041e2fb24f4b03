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
from harness import Probe, liveness_fired_at

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

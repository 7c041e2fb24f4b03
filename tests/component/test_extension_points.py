"""Adding a probe, a detector or a restart method is one file and one table row: the loop is not touched.

Each test adds one thing the package does not have, as a newcomer would, in its own small module
(here: a class in this file) plus one row of the public table it belongs to, hands the extended
table to the assembler (``loop/assemble.py``: ``Tables``) and shows, on an assembled daemon over a
fake /proc tree, a fake HTTP server and a fake clock, that it takes effect:

- a probe (``probes/table.py``: ``PROBE_TABLE``) runs on every tick, is counted under its name and
  feeds the series store;
- a detector (``detectors/kinds.py``: one ``KindSpec`` row, its kind declared in its own file with
  ``Kind.declare``) opens an incident of its kind;
- a restart method (``remediation/methods``: ``METHODS``) is the one a restart of a target whose
  ``restart.mode`` names it goes through, and the config accepts that name without a schema change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.kinds import KINDS, KindSpec
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.loop.assemble import assemble
from vllm_guardian.loop.tables import Tables
from vllm_guardian.model import Finding, Kind, Sample, Severity
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Seen
from vllm_guardian.probes.table import PROBE_TABLE
from vllm_guardian.remediation.methods import METHODS
from vllm_guardian.remediation.methods.base import MethodContext, SignalStop, StartStep, StopSent
from vllm_guardian.remediation.sequence import RestartSequence
from vllm_guardian.series.metrics import REQ_RUNNING
from tests.support.daemon_world import World

# ---------------------------------------------------------------- a new probe: one class, one row


class TargetCountProbe:
    """Counts the tracked targets on every tick (inline: on the loop thread, before detection)."""

    name = "target_count"
    inline = True

    def __init__(self, parts: ProbeParts) -> None:
        self.tracker = parts.tracker

    def jobs(self, now: float, seen: Seen) -> Iterable[Job]:
        return [Job("", lambda: len(self.tracker.targets), timeout=1.0)]

    def fold(self, result: Any, now: float) -> Folded:
        return Folded(samples=[Sample("node", "", "guardian.targets", float(result), now)])

    def close(self) -> None:
        return None


def test_a_probe_added_as_one_row_runs_every_tick_and_feeds_the_series(tmp_path):
    w = World(tmp_path)
    d = assemble(w.cfg, w.seams, log=w.log, tables=Tables(probes=(*PROBE_TABLE, ("target_count", TargetCountProbe))))
    try:
        for _ in range(4):
            w.clock.advance(1.0)
            d.tick()
            d.runner.wait_idle(5)
        assert d.stats.probes["target_count"].runs == 4
        latest = d.series.latest("node", "", "guardian.targets")
        assert latest is not None and latest[1] == 1.0
        assert d.status().to_dict()["probes"]["target_count"]["runs"] == 4
    finally:
        d.runner.shutdown()


# ---------------------------------------------------------------- a new detector: one file, one row

CROWDED = Kind.declare("crowded")  # the detector's file declares its kind


def crowded(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    """A ready server running 5 requests or more at once."""
    latest = view.series.latest(view.name, "", REQ_RUNNING)
    if not view.state.ready or latest is None or latest[1] < 5:
        return None
    return Finding(CROWDED, view.name, Severity.WARNING, f"{latest[1]:.0f} requests running", {})


def test_a_detector_added_as_one_kind_row_opens_an_incident_of_its_kind(tmp_path):
    w = World(tmp_path)
    kinds = {**KINDS, CROWDED: KindSpec(CROWDED, crowded, None)}
    d = assemble(w.cfg, w.seams, log=w.log, tables=Tables(kinds=kinds))
    w.d.runner.shutdown()
    w.d = d
    try:
        w.step(4, progress=True)
        assert not d.incidents.open_incidents()
        w.page.running = 7
        opened = [t.incident for t in w.step(3, progress=True) if t.previous is None]
        assert [(i.kind, i.target.name, i.summary) for i in opened] == [(CROWDED, "vllm-8000", "7 requests running")]
    finally:
        d.runner.shutdown()


# ---------------------------------------------------------------- a new restart method: one file, one row


class RecordedMethod(SignalStop):
    """Stops like ``signal`` does and starts nothing; remembers every call it was asked for."""

    name = "recorded"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def begin(self, seq: RestartSequence, ctx: MethodContext) -> None:
        self.calls.append(("begin", seq.target))

    def stop(self, seq: RestartSequence, rc: RestartConfig, grace: float, now: float, ctx: MethodContext) -> StopSent:
        self.calls.append(("stop", seq.target))
        return super().stop(seq, rc, grace, now, ctx)

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        self.calls.append(("start", seq.target))
        return StartStep("verify", "left to the test")


def test_a_restart_method_added_as_one_row_is_the_one_a_restart_goes_through(tmp_path):
    method = RecordedMethod()
    raw = {
        "node": "n1",
        "state_dir": str(tmp_path / "state"),
        "api": {"http": None},
        "targets": [
            {
                "name": "llm",
                "match": {"cmdline_regex": "--port 8000"},
                "restart": {"mode": "recorded", "owner_grace": 0},
            }
        ],
    }
    w = World(tmp_path)
    cfg = parse_config(raw)  # the schema takes the name; the assembler checks it against the table
    assert cfg.targets[0].restart.mode == "recorded"
    d = assemble(
        cfg,
        w.seams,
        log=logging.getLogger("test-ext"),
        tables=Tables(methods=(*METHODS, ("recorded", lambda units: method))),
    )
    w.d.runner.shutdown()
    w.d = d
    try:
        w.step(4)
        said = d.control_request({"cmd": "restart", "target": "llm"})
        assert "restart" in said
        w.step(5)
        assert [c for c in method.calls if c[0] in ("begin", "stop")] == [("begin", "llm"), ("stop", "llm")]
    finally:
        d.runner.shutdown()

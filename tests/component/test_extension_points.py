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

from test_daemon import World

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema import DetectorsConfig, RestartConfig
from vllm_guardian.detectors.kinds import KINDS, KindSpec
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.loop.assemble import Tables, assemble
from vllm_guardian.model import Finding, Kind, Sample, Severity
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Seen
from vllm_guardian.probes.table import PROBE_TABLE
from vllm_guardian.remediation.methods import METHODS
from vllm_guardian.remediation.methods.base import MethodContext, SignalStop, StartStep, StopSent
from vllm_guardian.remediation.sequence import RestartSequence

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
        return Folded(samples=[Sample("node", "guardian_targets", float(result), now)])

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
        assert d.series.latest("node", "guardian_targets") == 1.0
        assert "target_count" in d.status().to_dict()["guardian"]["probes"]
    finally:
        d.runner.shutdown()


# ---------------------------------------------------------------- a new detector: one file, one row

QUEUE_STUCK = Kind.declare("queue_stuck")  # the detector's file declares its kind


def queue_stuck(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    """Requests wait while none runs, on a server that is ready."""
    waiting = view.series.latest(view.state.name, "vllm_requests_waiting")
    if not view.state.ready or waiting is None or waiting < 5:
        return None
    return Finding(QUEUE_STUCK, view.state.name, Severity.WARNING, f"{waiting:.0f} requests waiting", {})


def test_a_detector_added_as_one_kind_row_opens_an_incident_of_its_kind(tmp_path):
    w = World(tmp_path)
    kinds = {**KINDS, QUEUE_STUCK: KindSpec(QUEUE_STUCK, queue_stuck, None)}
    d = assemble(w.cfg, w.seams, log=w.log, tables=Tables(kinds=kinds))
    w.d.runner.shutdown()
    w.d = d
    try:
        w.step(4)
        assert not d.incidents.open_incidents()
        w.page.waiting = 7
        opened = [t.incident for t in w.step(3) if t.previous is None]
        assert [(i.kind, i.target.name) for i in opened] == [(QUEUE_STUCK, "vllm-8000")]
        assert opened[0].summary == "7 requests waiting"
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
        "targets": [{"name": "llm", "match": {"port": 8000}, "restart": {"mode": "recorded", "owner_grace": 0}}],
    }
    w = World(tmp_path)
    cfg = parse_config(raw)  # the schema takes the name; the assembler checks it against the table
    assert cfg.targets[0].restart.mode == "recorded"
    d = assemble(cfg, w.seams, log=logging.getLogger("test-ext"), tables=Tables(methods=(*METHODS, ("recorded", lambda units: method))))
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

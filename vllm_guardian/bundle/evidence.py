"""Evidence before action: one bundle per incident under ``<state_dir>/incidents/<id>/`` (docs/design.md, Evidence).

Reads, in this order, for every process of the target's snapshotted tree:
1. On the hottest process, TWO ``record --nonblocking`` start (py-spy through the
   ``CommandRunner``), concurrently for the same seconds, ``--format flamegraph`` →
   ``flame-<pid>.svg`` and ``--format speedscope`` → ``flame-<pid>.speedscope.json``:
   they never stop the process, so they sample while the rest is read, and neither
   format has to be rendered by us.
2. ``/proc`` (through ``ProcFS.read_text``): the process's ``status``/``stat`` and,
   per thread, ``stat``, ``status``, ``syscall``, ``wchan``, ``stack`` → ``proc/<pid>/…``,
   and ``processes.json`` (psutil details). Before any dump, because a blocking py-spy
   dump ptrace-stops the threads and would hide the very syscall and wchan the
   incident is about.
3. ONE ``dump --json`` per pid on a small pool (at most 4 at once; blocking, with
   ``--native`` when configured; on failure one ``--nonblocking`` retry) →
   ``pyspy-<pid>-<role>.json`` and a ``.txt`` rendered from that same JSON in py-spy's
   text layout (one pause, and text and JSON show the same instant). A py-spy too old
   for ``--json`` is dumped in text mode and parsed.
   Then ``EvidenceContext.on_live_done`` is called: nothing more needs the processes,
   so a restart may stop them while the records finish (py-spy writes what it sampled
   when the tree dies).
3. ``series.json`` ({metric: {subject: [[t, v], …]}}, monotonic t),
   ``metrics.txt``, ``accelerators.json`` (when given), ``watchdog/VLLM_STACK_DUMP_for_<name>_<pid>.log``
   (vLLM's own stack dumps since the onset, when the server runs with ``--watchdog-config``:
   ``bundle.watchdog_dumps``), ``summary.txt`` (read it
   first) and ``capture.json`` (the manifest: files and sizes, failures and why,
   every py-spy call with its duration).
Then retention (``retention.apply_retention``) keeps the incidents folder bounded.

An ``output_corruption`` incident (a server answering wrong, not a stuck one) gets no py-spy
at all unless ``evidence.output_corruption_stacks`` asks: its bundle holds ``gates.json``
instead — the failing prompts, answers, logprobs, the baseline they were judged against,
the model and the vLLM version, from the incident's signals.

The steps are ``EvidenceCollector._plan`` (``bundle.plan``), ``_read_live`` (py-spy through
``bundle.stacks``, /proc through ``bundle.proc_copy``), ``_write_context``, ``_write_summary``
and the manifest (``bundle.manifest``). Never raises out of ``capture``: whatever failed is a
reason in ``failures``.
Files ``0640``, folders ``0750``; ``incident.json`` belongs to the IncidentStore
and is never written here; command lines and text are redacted (``redact``), and every
file is scrubbed of the secret values the guardian holds (``known_secrets``, through the
writer); py-spy ``--locals`` only when configured.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.host.process_details import ProcessDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.incidents.store import jsonable
from vllm_guardian.detectors.kinds import ANSWER_KINDS, GENTLE_EVIDENCE
from vllm_guardian.model import Incident, Role, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.bundle import pyspy, watchdog_dumps
from vllm_guardian.bundle.manifest import MANIFEST, build_manifest
from vllm_guardian.bundle.plan import RECORDS, CapturePlan
from vllm_guardian.bundle.proc_copy import ProcTexts, check_identity, copy_process
from vllm_guardian.bundle.stacks import DumpOutcome, StackReader, dump_name, settle
from vllm_guardian.bundle.writer import BundleWriter
from vllm_guardian.redact import redact_text
from vllm_guardian.bundle.retention import apply_retention
from vllm_guardian.bundle.summary import SummaryFacts, build_summary


# Kinds whose server is still serving: its stacks are read with ``--nonblocking`` only, so a
# capture never pauses healthy request handling (a hang or a spin is paused on purpose, once);
# kinds explained by the answers, not by stacks: no py-spy unless ``evidence.output_corruption_stacks``;
# their bundle gets ``gates.json`` (the failing prompts, answers, logprobs, baseline, model, version).
# Both are columns of the kind table (``detectors/kinds.py``).
NONBLOCKING_KINDS = GENTLE_EVIDENCE
GATES_FILE = "gates.json"
GATES_SIGNALS = ("model", "vllm_version", "condition", "conditions", "levels", "evidence", "failing_rounds", "reports")
log = logging.getLogger(__name__)

SUMMARY = "summary.txt"
SeriesWindows = Mapping[str, Mapping[str, Sequence[Sequence[float]]]]  # metric -> subject -> [[t, v], ...]
MAX_DUMP_WORKERS = 4
SLACK_S = 5.0


@dataclass(frozen=True)
class EvidenceContext:
    """Everything a capture needs, built on the loop thread (the capture never touches live state)."""

    incident: Incident | None  # None for a manual snapshot
    target: Target  # the tree snapshotted when the incident opened
    hottest_pid: int | None = None  # from the incident's signals or process CPU; chosen when None
    series: SeriesWindows = field(default_factory=dict)  # from series_windows()
    metrics_text: str | None = None
    accelerators: Mapping[str, Any] | None = None
    bundle_id: str | None = None  # default: the incident's id
    record_seconds: float | None = None  # default: evidence.record_seconds
    # called (from the capture's thread) once nothing more needs the processes alive: /proc
    # read, stacks dumped; a flame record may still be sampling (it ends with the tree)
    on_live_done: Callable[[], None] | None = None


@dataclass(frozen=True)
class EvidenceResult:
    dir: Path
    files: tuple[str, ...]  # relative to dir, sorted
    failures: Mapping[str, str]  # file or step → reason
    duration: float
    complete: bool
    removed: tuple[str, ...] = ()  # bundles deleted by retention afterwards


# ---------------------------------------------------------------- helpers for the integrator / CLI
def series_windows(store: SeriesStore, target: str, since: float) -> dict[str, dict[str, list[list[float]]]]:
    """Every series of ``target`` from ``since`` on, as {metric: {subject: [[t, v], ...]}}. Loop thread only."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for key in store.keys():  # noqa: SIM118 - SeriesStore.keys() is a method, not a dict view
        if key.target != target:
            continue
        points = store.window(target, key.subject, key.metric, since)
        if points:
            out.setdefault(key.metric, {})[key.subject] = [[t, v] for t, v in points]
    return out


def read_summary(bundle_dir: str | os.PathLike[str]) -> str:
    """The bundle's ``summary.txt``. ``FileNotFoundError`` when the bundle has none."""
    return (Path(bundle_dir) / SUMMARY).read_text(encoding="utf-8")


def choose_hottest(ctx: EvidenceContext) -> int | None:
    """The process to record: the context's choice, else the incident's signals pid, else the
    highest latest CPU ratio in the series, else the EngineCore, else the API server."""
    pids = [p.pid for p in ctx.target.processes]
    signal_pid = ctx.incident.signals.get("pid") if ctx.incident is not None else None
    for cand in (ctx.hottest_pid, signal_pid):
        if isinstance(cand, int) and cand in pids:
            return cand
    cpu = ctx.series.get(m.PROC_CPU, {})
    best = max(
        (
            (pts[-1][1], int(s[1:]))
            for s, pts in cpu.items()
            if pts and s.startswith("p") and s[1:].isdigit() and int(s[1:]) in pids
        ),
        default=None,
    )
    if best is not None:
        return best[1]
    engines = ctx.target.by_role(Role.ENGINE_CORE)
    return engines[0].pid if engines else (ctx.target.key.pid if pids else None)


def default_locate(name: str) -> str | None:
    """py-spy's argv[0]: as configured when found on PATH (or a path to a file), else the
    ``py-spy`` installed next to this Python (the package's own dependency), else None."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    if shutil.which(name):
        return name
    sibling = Path(sys.executable).with_name(name)
    return str(sibling) if os.access(sibling, os.X_OK) else None


@dataclass(frozen=True)
class _LiveReads:
    """What the capture read from the live processes, for the summary."""

    dumps: Mapping[int, DumpOutcome]  # pid -> its dump, for the dumps done by the deadline
    proc: ProcTexts


class EvidenceCollector:
    def __init__(
        self,
        cfg: EvidenceConfig,
        store_dir_for: Callable[[str], Path],
        runner: CommandRunner,
        procfs: ProcFS,
        clock: Clock,
        *,
        locate: Callable[[str], str | None] = default_locate,
        max_workers: int = MAX_DUMP_WORKERS,
        slack: float = SLACK_S,
        details: ProcessDetails | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self.cfg = cfg
        self._scrub = scrub  # the known secret values out of every file (bundle/known_secrets.py)
        self._dir_for = store_dir_for
        self._runner = runner
        self._procfs = procfs
        self._clock = clock
        self._locate = locate
        self._workers = max(1, min(MAX_DUMP_WORKERS, max_workers))
        self._slack = slack
        self._details = details  # psutil's per-process details (processes.json), when wired
        self._stacks = StackReader(cfg, runner)

    # ------------------------------------------------------------ public
    def deadline(self, n_processes: int, record_seconds: float | None = None) -> float:
        """Overall seconds a capture of ``n_processes`` may take: dumps (a retry each) + record + slack."""
        rounds = math.ceil(max(1, n_processes) / self._workers)
        rec = self.cfg.record_seconds if record_seconds is None else record_seconds
        record = pyspy.record_seconds_arg(rec) + self.cfg.dump_timeout if rec > 0 else 0.0
        return rounds * 2 * self.cfg.dump_timeout + record + self._slack

    def capture(self, ctx: EvidenceContext) -> EvidenceResult:
        """Write the bundle; never raises (a capture that breaks is reported in ``failures``)."""
        start = self._clock.monotonic()
        bundle_id = ctx.bundle_id or (ctx.incident.id if ctx.incident is not None else "")
        try:
            root = Path(self._dir_for(bundle_id))
        except (ValueError, OSError) as e:
            return EvidenceResult(
                Path(), (), {"bundle": f"no folder for {bundle_id!r}: {e}"}, self._clock.monotonic() - start, False
            )
        bundle = BundleWriter(root, self._scrub)
        removed: list[str] = []
        try:
            bundle.mkdir(root)
            removed = self._capture(ctx, bundle_id, bundle, start)
        except Exception as e:  # the daemon must continue whatever happens here
            log.exception("evidence capture %s failed", bundle_id)
            bundle.fail("capture", f"{type(e).__name__}: {e}")
        return EvidenceResult(
            root,
            tuple(sorted(bundle.files)),
            dict(bundle.failures),
            self._clock.monotonic() - start,
            not bundle.failures,
            tuple(removed),
        )

    def snapshot(
        self,
        target: Target,
        *,
        record_seconds: float | None = None,
        hottest_pid: int | None = None,
        series: SeriesWindows | None = None,
        metrics_text: str | None = None,
        accelerators: Mapping[str, Any] | None = None,
    ) -> EvidenceResult:
        """A manual bundle (``guardian snapshot``) under the id ``snapshot-<ULID>``; no incident."""
        ctx = EvidenceContext(
            None,
            target,
            hottest_pid,
            series or {},
            metrics_text,
            accelerators,
            bundle_id=f"snapshot-{new_incident_id(self._clock.wall())}",
            record_seconds=record_seconds,
        )
        return self.capture(ctx)

    # ------------------------------------------------------------ the capture, step by step
    def _capture(self, ctx: EvidenceContext, bundle_id: str, bundle: BundleWriter, start: float) -> list[str]:
        plan = self._plan(ctx, bundle_id, bundle, start)
        live = self._read_live(ctx, plan, bundle)
        self._write_watchdog(ctx, bundle)
        self._write_context(ctx, plan, bundle)
        self._write_summary(ctx, plan, live, bundle)
        removed = self._retention(bundle.root, bundle_id)
        doc = build_manifest(plan, ctx.incident, ctx.target, bundle, removed, self._clock.monotonic() - start)
        bundle.write(MANIFEST, redact_text(json.dumps(jsonable(doc), indent=2)) + "\n")
        return removed

    def _plan(self, ctx: EvidenceContext, bundle_id: str, bundle: BundleWriter, start: float) -> CapturePlan:
        """Which processes are still themselves, whether and how to read stacks, the deadline."""
        wall = self._clock.wall()
        alive = tuple(p for p in ctx.target.processes if check_identity(self._procfs, p, bundle))
        answers = ctx.incident is not None and ctx.incident.kind in ANSWER_KINDS
        stacks = not answers or self.cfg.output_corruption_stacks
        exe = self._locate(self.cfg.pyspy) if stacks else None
        if not stacks:
            bundle.note("py-spy", "not run: the answers explain this kind (evidence.output_corruption_stacks: false)")
        elif exe is None:
            bundle.fail("py-spy", pyspy.MISSING_REASON)
        hottest = choose_hottest(ctx)
        seconds = self.cfg.record_seconds if ctx.record_seconds is None else ctx.record_seconds
        recorded = hottest if (exe and seconds > 0 and any(p.pid == hottest for p in alive)) else None
        # a leak or a blind probe leaves the server serving: never pause it for a stack
        gentle = ctx.incident is not None and ctx.incident.kind in NONBLOCKING_KINDS
        deadline = self.deadline(len(alive), seconds)
        until = time.monotonic() + deadline  # a real wait on real threads, whatever the clock seam says
        return CapturePlan(
            bundle_id, wall, start, alive, answers, exe, hottest, seconds, recorded, gentle, deadline, until
        )

    def _write_watchdog(self, ctx: EvidenceContext, bundle: BundleWriter) -> None:
        """vLLM's own stack dumps (``--watchdog-config``) written since the onset, into ``watchdog/``."""
        dump_dir = watchdog_dumps.dump_dir_of(ctx.target)
        if dump_dir is None or ctx.incident is None:
            return
        onset = ctx.incident.opened_at - watchdog_dumps.ONSET_LOOKBACK_S
        dumps = watchdog_dumps.collect(dump_dir, onset)
        for d in dumps:
            bundle.write(f"{watchdog_dumps.BUNDLE_DIR}/{os.path.basename(d.path)}", redact_text(d.text))
        if not dumps:
            bundle.note("watchdog", f"no vLLM stack dump in {dump_dir} since the onset")

    def _read_live(self, ctx: EvidenceContext, plan: CapturePlan, bundle: BundleWriter) -> _LiveReads:
        """Everything that needs the processes alive: records started first (they sample while
        the rest is read), /proc before any dump (a blocking dump would hide the syscall and
        wchan), the psutil details, then the dumps; ``on_live_done`` once they are in hand."""
        proc_texts: ProcTexts = {}
        dumps: dict[int, DumpOutcome] = {}
        exe, pool = plan.exe, None
        records: dict[Future[None], str] = {}
        try:
            if exe:
                n_rec = len(RECORDS) if plan.recorded is not None else 0
                pool = ThreadPoolExecutor(
                    max_workers=min(self._workers, max(1, len(plan.alive))) + n_rec,
                    thread_name_prefix=f"evidence-{plan.bundle_id[-6:]}",
                )
                records = self._start_records(pool, exe, plan, bundle)
            for p in plan.alive:
                copy_process(self._procfs, p.pid, bundle, proc_texts)
            self._write_details(plan, bundle)
            if pool is not None and exe:
                dumps = self._dump_all(pool, exe, plan, bundle)
        finally:
            # everything that needs the processes alive is in hand: the stop may go on; a record
            # still sampling keeps what it saw until the tree dies (py-spy writes it then)
            if ctx.on_live_done is not None:
                ctx.on_live_done()
        if pool is not None:
            settle(records, plan.until, plan.deadline, bundle)
            pool.shutdown(wait=False, cancel_futures=True)
        return _LiveReads(dumps, proc_texts)

    def _start_records(
        self, pool: ThreadPoolExecutor, exe: str, plan: CapturePlan, bundle: BundleWriter
    ) -> dict[Future[None], str]:
        records: dict[Future[None], str] = {}
        if plan.recorded is None:
            return records
        for fmt, suffix in RECORDS:  # non-blocking samplers: they run while /proc is read
            rel = f"flame-{plan.recorded}.{suffix}"
            records[pool.submit(self._stacks.record, exe, plan.recorded, plan.seconds, fmt, rel, bundle)] = rel
        return records

    def _write_details(self, plan: CapturePlan, bundle: BundleWriter) -> None:
        if self._details is None or not plan.alive:
            return
        try:
            details = self._details.read([p.key for p in plan.alive])
            bundle.write("processes.json", json.dumps(jsonable(details), indent=2) + "\n")
        except Exception as e:  # noqa: BLE001 - optional evidence: a failure is recorded, the bundle goes on
            bundle.fail("processes.json", f"{type(e).__name__}: {e}")

    def _dump_all(
        self, pool: ThreadPoolExecutor, exe: str, plan: CapturePlan, bundle: BundleWriter
    ) -> dict[int, DumpOutcome]:
        """One dump per live process on the pool; those done by the deadline."""
        futures = {p.pid: pool.submit(self._stacks.dump, exe, p, bundle, plan.gentle) for p in plan.alive}
        settle({futures[p.pid]: dump_name(p, "json") for p in plan.alive}, plan.until, plan.deadline, bundle)
        return {pid: f.result() for pid, f in futures.items() if f.done() and not f.cancelled() and not f.exception()}

    def _write_context(self, ctx: EvidenceContext, plan: CapturePlan, bundle: BundleWriter) -> None:
        """What the loop knew: the gates' failing rounds (an answers kind), series, metrics, accelerators."""
        if plan.answers and ctx.incident is not None:
            sig = ctx.incident.signals
            gates = {k: sig[k] for k in GATES_SIGNALS if k in sig}
            bundle.write(GATES_FILE, redact_text(json.dumps(jsonable(gates), indent=1, ensure_ascii=False)) + "\n")
        if ctx.series:
            bundle.write("series.json", json.dumps(jsonable(ctx.series), separators=(",", ":")) + "\n")
        if ctx.metrics_text:
            bundle.write("metrics.txt", redact_text(ctx.metrics_text))
        if ctx.accelerators is not None:
            bundle.write("accelerators.json", redact_text(json.dumps(jsonable(ctx.accelerators), indent=2)) + "\n")

    def _write_summary(self, ctx: EvidenceContext, plan: CapturePlan, live: _LiveReads, bundle: BundleWriter) -> None:
        focus = _focus_pid(ctx, plan.hottest)
        dump = live.dumps.get(focus) if focus is not None else None
        facts = SummaryFacts(
            plan.bundle_id,
            ctx.incident,
            ctx.target,
            focus,
            threads=dump.threads if dump else (),
            dump_mode=dump.mode if dump else "",
            dump_error=(dump.error if dump else "")
            or bundle.failures.get("py-spy", "")
            or bundle.failures.get(f"proc/{focus}", ""),
            proc={(tid, name): text for (pid, tid, name), text in live.proc.items() if pid == focus and tid},
            record_files=sorted(n for n in bundle.files if n.startswith("flame-")),
            record_seconds=pyspy.record_seconds_arg(plan.seconds) if plan.recorded is not None else 0,
            file_count=len(bundle.files),
            failures=dict(bundle.failures),
            duration=self._clock.monotonic() - plan.start,
        )
        bundle.write(SUMMARY, redact_text(build_summary(facts)))

    def _retention(self, root: Path, bundle_id: str) -> list[str]:
        r = self.cfg.retention
        try:
            return apply_retention(root.parent, r.max_bundles, r.max_bytes, protect=(bundle_id,))
        except OSError as e:
            log.warning("evidence retention failed: %s", e)
            return []


def _focus_pid(ctx: EvidenceContext, hottest: int | None) -> int | None:
    sig = ctx.incident.signals.get("pid") if ctx.incident is not None else None
    return sig if isinstance(sig, int) and any(p.pid == sig for p in ctx.target.processes) else hottest

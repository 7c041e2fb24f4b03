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
   ``metrics.txt``, ``accelerators.json`` (when given), ``summary.txt`` (read it
   first) and ``capture.json`` (the manifest: files and sizes, failures and why,
   every py-spy call with its duration).
Then retention (``retention.apply_retention``) keeps the incidents folder bounded.

An ``output_corruption`` incident (a server answering wrong, not a stuck one) gets no py-spy
at all unless ``evidence.output_corruption_stacks`` asks: its bundle holds ``gates.json``
instead — the failing prompts, answers, logprobs, the baseline they were judged against,
the model and the vLLM version, from the incident's signals.

Never raises out of ``capture``: whatever failed is a reason in ``failures``.
Files ``0640``, folders ``0750``; ``incident.json`` belongs to the IncidentStore
and is never written here; command lines and text are redacted (``redact``);
py-spy ``--locals`` only when configured.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.errors import AccessDenied, BackendUnavailable, GuardianError, TargetGone
from vllm_guardian.host.process_details import ProcessDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import CommandResult, CommandRunner
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.incidents.store import jsonable
from vllm_guardian.detectors.kinds import ANSWER_KINDS, GENTLE_EVIDENCE
from vllm_guardian.model import Incident, ProcessInfo, Role, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.writer import FILE_MODE, BundleWriter
from vllm_guardian.bundle.redact import redact_argv, redact_text
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

MANIFEST = "capture.json"
SUMMARY = "summary.txt"
PROCESS_FILES = ("status", "stat")
THREAD_FILES = ("stat", "status", "syscall", "wchan", "stack")
RECORDS = (("flamegraph", "svg"), ("speedscope", "speedscope.json"))
MAX_DUMP_WORKERS = 4
SLACK_S = 5.0


@dataclass(frozen=True)
class EvidenceContext:
    """Everything a capture needs, built on the loop thread (the capture never touches live state)."""

    incident: Incident | None  # None for a manual snapshot
    target: Target  # the tree snapshotted when the incident opened
    hottest_pid: int | None = None  # from the incident's signals or process CPU; chosen when None
    series: Mapping[str, Any] = field(default_factory=dict)  # from series_windows()
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
    cpu = ctx.series.get(m.PROC_CPU, {}) if isinstance(ctx.series, Mapping) else {}
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


@dataclass
class _Dump:
    """What the dump of one process produced (for the summary)."""

    threads: tuple[pyspy.ThreadStack, ...] = ()
    mode: str = ""
    error: str = ""


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
    ) -> None:
        self.cfg = cfg
        self._dir_for = store_dir_for
        self._runner = runner
        self._procfs = procfs
        self._clock = clock
        self._locate = locate
        self._workers = max(1, min(MAX_DUMP_WORKERS, max_workers))
        self._slack = slack
        self._details = details  # psutil's per-process details (processes.json), when wired

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
        bundle = BundleWriter(root)
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
        series: Mapping[str, Any] | None = None,
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

    # ------------------------------------------------------------ the capture
    def _capture(self, ctx: EvidenceContext, bundle_id: str, bundle: BundleWriter, start: float) -> list[str]:
        wall = self._clock.wall()
        alive = [p for p in ctx.target.processes if self._check_identity(p, bundle)]
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
        dumps: dict[int, _Dump] = {p.pid: _Dump() for p in alive}
        # a leak or a blind probe leaves the server serving: never pause it for a stack
        gentle = ctx.incident is not None and ctx.incident.kind in NONBLOCKING_KINDS
        deadline = self.deadline(len(alive), seconds)
        until = time.monotonic() + deadline  # a real wait on real threads, whatever the clock seam says
        proc_texts: dict[tuple[int, int, str], str] = {}
        pool = None
        records: dict = {}
        try:
            if exe:
                n_rec = len(RECORDS) if recorded is not None else 0
                pool = ThreadPoolExecutor(
                    max_workers=min(self._workers, max(1, len(alive))) + n_rec,
                    thread_name_prefix=f"evidence-{bundle_id[-6:]}",
                )
                if recorded is not None:  # non-blocking samplers: they run while /proc is read
                    for fmt, suffix in RECORDS:
                        rel = f"flame-{recorded}.{suffix}"
                        records[pool.submit(self._record, exe, recorded, seconds, fmt, rel, bundle)] = rel
            for p in alive:
                self._read_proc(p.pid, bundle, proc_texts)
            if self._details is not None and alive:
                try:
                    details = self._details.read([p.key for p in alive])
                    bundle.write("processes.json", json.dumps(jsonable(details), indent=2) + "\n")
                except Exception as e:  # noqa: BLE001 - optional evidence: a failure is recorded, the bundle goes on
                    bundle.fail("processes.json", f"{type(e).__name__}: {e}")
            if pool is not None and exe:
                dumping = {
                    pool.submit(self._dump, exe, p, bundle, dumps[p.pid], gentle): _dump_name(p, "json") for p in alive
                }
                self._settle(dumping, until, deadline, bundle)
        finally:
            # everything that needs the processes alive is in hand: the stop may go on; a record
            # still sampling keeps what it saw until the tree dies (py-spy writes it then)
            if ctx.on_live_done is not None:
                ctx.on_live_done()
        if pool is not None:
            self._settle(records, until, deadline, bundle)
            pool.shutdown(wait=False, cancel_futures=True)

        if answers and ctx.incident is not None:
            sig = ctx.incident.signals
            gates = {k: sig[k] for k in GATES_SIGNALS if k in sig}
            bundle.write(GATES_FILE, redact_text(json.dumps(jsonable(gates), indent=1, ensure_ascii=False)) + "\n")
        if ctx.series:
            bundle.write("series.json", json.dumps(jsonable(ctx.series), separators=(",", ":")) + "\n")
        if ctx.metrics_text:
            bundle.write("metrics.txt", redact_text(ctx.metrics_text))
        if ctx.accelerators is not None:
            bundle.write("accelerators.json", redact_text(json.dumps(jsonable(ctx.accelerators), indent=2)) + "\n")

        focus = _focus_pid(ctx, hottest)
        duration = self._clock.monotonic() - start
        dump = dumps.get(focus) if focus is not None else None
        facts = SummaryFacts(
            bundle_id,
            ctx.incident,
            ctx.target,
            focus,
            threads=dump.threads if dump else (),
            dump_mode=dump.mode if dump else "",
            dump_error=(dump.error if dump else "")
            or bundle.failures.get("py-spy", "")
            or bundle.failures.get(f"proc/{focus}", ""),
            proc={(tid, name): text for (pid, tid, name), text in proc_texts.items() if pid == focus and tid},
            record_files=sorted(n for n in bundle.files if n.startswith("flame-")),
            record_seconds=pyspy.record_seconds_arg(seconds) if recorded is not None else 0,
            file_count=len(bundle.files),
            failures=dict(bundle.failures),
            duration=duration,
        )
        bundle.write(SUMMARY, redact_text(build_summary(facts)))
        removed = self._retention(bundle.root, bundle_id)
        manifest = {
            "schema": 1,
            "id": bundle_id,
            "incident": None
            if ctx.incident is None
            else {
                "id": ctx.incident.id,
                "kind": ctx.incident.kind.value,
                "status": ctx.incident.status.value,
                "summary": ctx.incident.summary,
                "signals": jsonable(ctx.incident.signals),
            },
            "target": {
                "name": ctx.target.name,
                "pid": ctx.target.key.pid,
                "starttime": ctx.target.key.starttime,
                "port": ctx.target.port,
            },
            "processes": [
                {
                    "pid": p.pid,
                    "starttime": p.key.starttime,
                    "role": p.role.value,
                    "cmdline": list(redact_argv(p.cmdline)),
                    "captured": p in alive,
                }
                for p in ctx.target.processes
            ],
            "pyspy": exe,
            "hottest_pid": hottest,
            "record": None
            if recorded is None
            else {"pid": recorded, "seconds": pyspy.record_seconds_arg(seconds), "formats": [f for f, _ in RECORDS]},
            "started_at": wall,
            "monotonic_at_start": start,
            "deadline_s": deadline,
            "duration_s": round(self._clock.monotonic() - start, 3),
            "complete": not bundle.failures,
            "files": [{"name": n, "bytes": s} for n, s in sorted(bundle.files.items())],
            "failures": dict(sorted(bundle.failures.items())),
            "notes": dict(sorted(bundle.notes.items())),
            "steps": list(bundle.steps),
            "retention_removed": removed,
        }
        bundle.write(MANIFEST, redact_text(json.dumps(jsonable(manifest), indent=2)) + "\n")
        return removed

    def _retention(self, root: Path, bundle_id: str) -> list[str]:
        r = self.cfg.retention
        try:
            return apply_retention(root.parent, r.max_bundles, r.max_bytes, protect=(bundle_id,))
        except OSError as e:
            log.warning("evidence retention failed: %s", e)
            return []

    # ------------------------------------------------------------ /proc
    def _check_identity(self, p: ProcessInfo, bundle: BundleWriter) -> bool:
        """Same process as in the snapshot (pid AND starttime) and not a zombie; else a reason."""
        try:
            st = self._procfs.stat(p.pid)
        except TargetGone as e:
            bundle.fail(f"proc/{p.pid}", f"process gone before capture: {e}")
            return False
        except GuardianError as e:
            bundle.fail(f"proc/{p.pid}/stat", f"identity not verifiable: {e}")
            return True
        if st.starttime != p.key.starttime:
            bundle.fail(
                f"proc/{p.pid}",
                f"pid {p.pid} now belongs to another process "
                f"(starttime {st.starttime} != {p.key.starttime}): not captured",
            )
            return False
        if st.state in ("Z", "X"):
            bundle.fail(f"proc/{p.pid}", "process exited (zombie): no stacks to take")
            return False
        return True

    def _read_proc(self, pid: int, bundle: BundleWriter, texts: dict[tuple[int, int, str], str]) -> None:
        for name in PROCESS_FILES:
            self._copy(f"{pid}/{name}", bundle, texts, (pid, 0, name))
        try:
            tids = self._procfs.tids(pid)
        except GuardianError as e:
            bundle.fail(f"proc/{pid}/task", _proc_reason(e))
            return
        for tid in tids:
            for name in THREAD_FILES:
                if not self._copy(f"{pid}/task/{tid}/{name}", bundle, texts, (pid, tid, name)) and name == "stat":
                    break  # the thread is gone: its other files are too

    def _copy(self, rel: str, bundle: BundleWriter, texts: dict, key: tuple[int, int, str]) -> bool:
        try:
            text = self._procfs.read_text(rel)
        except GuardianError as e:
            bundle.fail(f"proc/{rel}", _proc_reason(e))
            return False
        texts[key] = text
        bundle.write(f"proc/{rel}", text)
        return True

    # ------------------------------------------------------------ py-spy
    def _run(
        self, argv: list[str], timeout: float, what: str, pid: int, mode: str, bundle: BundleWriter
    ) -> tuple[CommandResult | None, pyspy.Failure | None]:
        try:
            res = self._runner.run(argv, timeout)
        except BackendUnavailable as e:
            missing = pyspy.Failure("missing", f"{pyspy.MISSING_REASON} ({e})")
            bundle.step({"what": what, "pid": pid, "mode": mode, "argv": argv, "error": missing.reason})
            return None, missing
        fail = pyspy.classify(res.returncode, res.error_text, res.timed_out, timeout)
        bundle.step(
            {
                "what": what,
                "pid": pid,
                "mode": mode,
                "argv": argv,
                "rc": res.returncode,
                "duration_s": round(res.duration, 3),
                "timed_out": res.timed_out,
                "error": fail.reason if fail else None,
            }
        )
        return res, fail

    def _dump(self, exe: str, p: ProcessInfo, bundle: BundleWriter, out: _Dump, gentle: bool = False) -> None:
        timeout = self.cfg.dump_timeout
        if gentle:  # --nonblocking only: the process keeps running while it is read
            argv = pyspy.dump_argv(exe, p.pid, nonblocking=True, with_locals=self.cfg.locals)
            res, fail = self._run(argv, timeout, "dump", p.pid, "nonblocking", bundle)
            mode, note = "nonblocking", ""
        else:
            argv = pyspy.dump_argv(exe, p.pid, native=self.cfg.native, with_locals=self.cfg.locals)
            res, fail = self._run(argv, timeout, "dump", p.pid, "blocking", bundle)
            mode, note = "blocking", ""
        if fail is not None and fail.retry_nonblocking and not gentle:
            note = f"blocking dump failed: {fail.reason}; retried with --nonblocking"
            argv = pyspy.dump_argv(exe, p.pid, nonblocking=True, with_locals=self.cfg.locals)
            res, fail = self._run(argv, timeout, "dump", p.pid, "nonblocking", bundle)
            mode = "nonblocking"
        as_text = False
        if fail is not None and fail.kind == "usage" and "--json" in (res.error_text if res else ""):
            argv = [a for a in argv if a != "--json"]  # a py-spy without --json: text mode, parsed
            res, fail = self._run(argv, timeout, "dump", p.pid, mode + "-text", bundle)
            as_text = True
        if fail is not None or res is None:
            reason = fail.reason if fail else "no result"
            out.error = f"{note}; then: {reason}" if note else reason
            bundle.fail(_dump_name(p, "json"), out.error)
            return
        try:
            threads = pyspy.parse_dump_text(res.text) if as_text else pyspy.parse_dump_json(res.text)
        except ValueError as e:
            out.error = f"unparsable py-spy output: {e}"
            bundle.fail(_dump_name(p, "json"), out.error)
            bundle.write(_dump_name(p, "txt"), redact_text(res.text))
            return
        out.threads, out.mode = threads, mode
        if note:
            bundle.note(_dump_name(p, "json"), note)
        mode_line = f"Mode: {mode}" + (f" ({note})" if note else "") + "\n"
        if as_text:
            bundle.write(_dump_name(p, "txt"), mode_line + redact_text(res.text))
        else:
            header = f"Process {p.pid}: {' '.join(redact_argv(p.cmdline))}\n{mode_line}\n"
            bundle.write(_dump_name(p, "json"), pyspy.scrub_dump_json(res.text))
            bundle.write(_dump_name(p, "txt"), redact_text(header + pyspy.render_text(threads)))

    @staticmethod
    def _settle(futures: dict, until: float, deadline: float, bundle: BundleWriter) -> None:
        """Wait for these py-spy calls until ``until`` (time.monotonic), the capture's overall
        ``deadline`` seconds after it began; what is late or broke is a failure."""
        done, pending = wait(futures, timeout=max(0.0, until - time.monotonic()))
        for f in pending:
            f.cancel()
            bundle.fail(futures[f], f"overall capture deadline of {deadline:g} s passed")
        for f in done:
            if f.exception() is not None:
                bundle.fail(futures[f], f"{type(f.exception()).__name__}: {f.exception()}")

    def _record(self, exe: str, pid: int, seconds: float, fmt: str, rel: str, bundle: BundleWriter) -> None:
        path = bundle.root / rel
        argv = pyspy.record_argv(exe, pid, seconds, fmt, str(path))
        timeout = pyspy.record_seconds_arg(seconds) + self.cfg.dump_timeout
        _res, fail = self._run(argv, timeout, "record", pid, "nonblocking", bundle)
        size = path.stat().st_size if path.is_file() else 0
        if fail is None and size == 0:
            fail = pyspy.Failure("error", "py-spy record wrote no output")
        if fail is not None:
            path.unlink(missing_ok=True)
            bundle.fail(rel, fail.reason)
            return
        os.chmod(path, FILE_MODE)
        bundle.adopt(rel, size)


def _dump_name(p: ProcessInfo, ext: str) -> str:
    return f"pyspy-{p.pid}-{p.role.value}.{ext}"


def _proc_reason(e: GuardianError) -> str:
    if isinstance(e, TargetGone):
        return f"gone: {e}"
    if isinstance(e, AccessDenied):
        return f"not permitted (needs root or CAP_SYS_PTRACE): {e}"
    return str(e)


def _focus_pid(ctx: EvidenceContext, hottest: int | None) -> int | None:
    sig = ctx.incident.signals.get("pid") if ctx.incident is not None else None
    return sig if isinstance(sig, int) and any(p.pid == sig for p in ctx.target.processes) else hottest

"""py-spy against the snapshotted processes, for one bundle: dumps, flame records, the wait on them.

``StackReader.dump`` takes ONE ``dump --json`` of a process (blocking, with ``--native`` when
configured; on a failure that allows it one ``--nonblocking`` retry; ``gentle``: nonblocking
only) → ``pyspy-<pid>-<role>.json`` and a ``.txt`` rendered from that same JSON; a py-spy too
old for ``--json`` is dumped in text mode and parsed. ``record`` runs one ``record
--nonblocking`` into the bundle (a flamegraph or a speedscope file). Every call is a manifest
step (argv, rc, duration, error); whatever fails is a failure of its file, with the reason.
``settle`` waits for submitted calls until the capture's overall deadline.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from vllm_guardian.bundle import pyspy
from vllm_guardian.redact import redact_argv, redact_text
from vllm_guardian.bundle.writer import FILE_MODE, BundleWriter, PySpyCall
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.runner import CommandResult, CommandRunner
from vllm_guardian.model import ProcessInfo


@dataclass(frozen=True)
class DumpOutcome:
    """What the dump of one process produced (for the summary)."""

    threads: tuple[pyspy.ThreadStack, ...] = ()
    mode: str = ""  # blocking | nonblocking
    error: str = ""  # why there are no threads


def dump_name(p: ProcessInfo, ext: str) -> str:
    return f"pyspy-{p.pid}-{p.role.value}.{ext}"


class StackReader:
    def __init__(self, cfg: EvidenceConfig, runner: CommandRunner) -> None:
        self.cfg = cfg
        self._runner = runner

    def run(
        self, argv: list[str], timeout: float, what: str, pid: int, mode: str, bundle: BundleWriter
    ) -> tuple[CommandResult | None, pyspy.Failure | None]:
        """One py-spy call, recorded as a manifest step; (its result, why it failed)."""
        try:
            res = self._runner.run(argv, timeout)
        except BackendUnavailable as e:
            missing = pyspy.Failure("missing", f"{pyspy.MISSING_REASON} ({e})")
            bundle.step(PySpyCall(what, pid, mode, tuple(argv), missing.reason, ran=False))
            return None, missing
        fail = pyspy.classify(res.returncode, res.error_text, res.timed_out, timeout)
        error = fail.reason if fail else None
        bundle.step(PySpyCall(what, pid, mode, tuple(argv), error, True, res.returncode, res.duration, res.timed_out))
        return res, fail

    def dump(self, exe: str, p: ProcessInfo, bundle: BundleWriter, gentle: bool = False) -> DumpOutcome:
        timeout, cfg = self.cfg.dump_timeout, self.cfg
        if gentle:  # --nonblocking only: the process keeps running while it is read
            argv = pyspy.dump_argv(exe, p.pid, nonblocking=True, with_locals=cfg.locals)
            mode = "nonblocking"
        else:
            argv = pyspy.dump_argv(exe, p.pid, native=cfg.native, with_locals=cfg.locals)
            mode = "blocking"
        res, fail = self.run(argv, timeout, "dump", p.pid, mode, bundle)
        note = ""
        if fail is not None and fail.retry_nonblocking and not gentle:
            note = f"blocking dump failed: {fail.reason}; retried with --nonblocking"
            argv = pyspy.dump_argv(exe, p.pid, nonblocking=True, with_locals=cfg.locals)
            res, fail = self.run(argv, timeout, "dump", p.pid, "nonblocking", bundle)
            mode = "nonblocking"
        as_text = False
        if fail is not None and fail.kind == "usage" and "--json" in (res.error_text if res else ""):
            argv = [a for a in argv if a != "--json"]  # a py-spy without --json: text mode, parsed
            res, fail = self.run(argv, timeout, "dump", p.pid, mode + "-text", bundle)
            as_text = True
        if fail is not None or res is None:
            reason = fail.reason if fail else "no result"
            error = f"{note}; then: {reason}" if note else reason
            bundle.fail(dump_name(p, "json"), error)
            return DumpOutcome(error=error)
        try:
            threads = pyspy.parse_dump_text(res.text) if as_text else pyspy.parse_dump_json(res.text)
        except ValueError as e:
            error = f"unparsable py-spy output: {e}"
            bundle.fail(dump_name(p, "json"), error)
            bundle.write(dump_name(p, "txt"), redact_text(res.text))
            return DumpOutcome(error=error)
        if note:
            bundle.note(dump_name(p, "json"), note)
        mode_line = f"Mode: {mode}" + (f" ({note})" if note else "") + "\n"
        if as_text:
            bundle.write(dump_name(p, "txt"), mode_line + redact_text(res.text))
        else:
            header = f"Process {p.pid}: {' '.join(redact_argv(p.cmdline))}\n{mode_line}\n"
            bundle.write(dump_name(p, "json"), pyspy.scrub_dump_json(res.text))
            bundle.write(dump_name(p, "txt"), redact_text(header + pyspy.render_text(threads)))
        return DumpOutcome(threads, mode)

    def record(self, exe: str, pid: int, seconds: float, fmt: str, rel: str, bundle: BundleWriter) -> None:
        path = bundle.root / rel
        argv = pyspy.record_argv(exe, pid, seconds, fmt, str(path))
        timeout = pyspy.record_seconds_arg(seconds) + self.cfg.dump_timeout
        _res, fail = self.run(argv, timeout, "record", pid, "nonblocking", bundle)
        size = path.stat().st_size if path.is_file() else 0
        if fail is None and size == 0:
            fail = pyspy.Failure("error", "py-spy record wrote no output")
        if fail is not None:
            path.unlink(missing_ok=True)
            bundle.fail(rel, fail.reason)
            return
        os.chmod(path, FILE_MODE)
        bundle.adopt(rel, size)


def settle(futures: Mapping[Future[Any], str], until: float, deadline: float, bundle: BundleWriter) -> None:
    """Wait for these py-spy calls (future → its file) until ``until`` (time.monotonic), the
    capture's overall ``deadline`` seconds after it began; what is late or broke is a failure."""
    done, pending = wait(futures, timeout=max(0.0, until - time.monotonic()))
    for f in pending:
        f.cancel()
        bundle.fail(futures[f], f"overall capture deadline of {deadline:g} s passed")
    for f in done:
        exc = f.exception()
        if exc is not None:
            bundle.fail(futures[f], f"{type(exc).__name__}: {exc}")

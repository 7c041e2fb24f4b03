"""The ``summary.txt`` of an evidence bundle: what a person reads first. Pure formatting.

Decides what to show from what the capture found: what fired (kind, summary,
signals), the process and thread the incident points at (its ``tid`` when the
signals name one, else the thread holding the GIL, else an active one), that
thread's innermost Python frames from its py-spy JSON dump, and its /proc state
(state, syscall, wchan, CPU ticks, context switches) parsed from the copies
the bundle holds. Redaction is the caller's job (it redacts the finished text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vllm_guardian.host.procfs_parse import parse_stat, parse_status, parse_syscall, parse_wchan
from vllm_guardian.model import Incident, Target
from vllm_guardian.bundle.pyspy import ThreadStack, pick_thread

FRAMES = 8
SIGNALS_SHOWN = 16


@dataclass(frozen=True)
class SummaryFacts:
    bundle_id: str
    incident: Incident | None
    target: Target
    focus_pid: int | None
    threads: Sequence[ThreadStack] = ()  # the focus process's py-spy dump
    dump_mode: str = ""
    dump_error: str = ""
    proc: Mapping[tuple[int, str], str] = field(default_factory=dict)  # (tid, file) → text, focus process
    record_files: Sequence[str] = ()
    record_seconds: int = 0
    file_count: int = 0
    failures: Mapping[str, str] = field(default_factory=dict)
    duration: float = 0.0


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def proc_line(tid: int, texts: Mapping[tuple[int, str], str]) -> str | None:
    """``state R, syscall running, wchan -, cpu 1234 ticks, switches 3 voluntary / 4567 involuntary``."""
    parts = []
    try:
        st = parse_stat(texts[(tid, "stat")])
        parts += [f"state {st.state}", f"cpu {st.utime + st.stime} ticks (utime+stime)"]
    except (KeyError, ValueError):
        pass
    try:
        sc = parse_syscall(texts[(tid, "syscall")])
        parts.append(
            "syscall running"
            if sc.running
            else "blocked outside a syscall"
            if sc.blocked_outside_syscall
            else f"syscall {sc.nr}"
        )
    except (KeyError, ValueError):
        pass
    if (tid, "wchan") in texts:
        parts.append(f"wchan {parse_wchan(texts[(tid, 'wchan')]) or '-'}")
    try:
        ss = parse_status(texts[(tid, "status")])
        parts.append(f"switches {ss.voluntary_ctxt_switches} voluntary / {ss.nonvoluntary_ctxt_switches} involuntary")
    except (KeyError, ValueError):
        pass
    return f"/proc thread {tid}: " + ", ".join(parts) if parts else None


def build_summary(f: SummaryFacts) -> str:
    lines: list[str] = []
    inc, tgt = f.incident, f.target
    where = f"target {tgt.name} (api pid {tgt.key.pid}" + (f", port {tgt.port})" if tgt.port else ")")
    if inc is not None:
        lines.append(
            f"Incident {inc.id}: {inc.kind.value} ({inc.severity.value}, {inc.status.value}) "
            f"on {where}, node {inc.node}"
        )
        lines.append(f"What fired: {inc.summary}")
        sig = [f"{k}={_value(v)}" for k, v in sorted(inc.signals.items()) if v is not None]
        if sig:
            more = f" (+{len(sig) - SIGNALS_SHOWN} more in capture.json)" if len(sig) > SIGNALS_SHOWN else ""
            lines.append("Signals: " + ", ".join(sig[:SIGNALS_SHOWN]) + more)
    else:
        lines.append(f"Evidence snapshot {f.bundle_id} of {where}")
    lines.append("")

    proc = next((p for p in tgt.processes if p.pid == f.focus_pid), None)
    if proc is not None:
        lines.append(f"Process {proc.pid} ({proc.role.value}): {proc.title}")
        tid = inc.signals.get("tid") if inc is not None else None
        thread = pick_thread(f.threads, tid if isinstance(tid, int) else None)
        if thread is not None:
            name = f' "{thread.name}"' if thread.name else ""
            ident = thread.os_thread_id if thread.os_thread_id is not None else f"{thread.thread_id or 0:#x}"
            lines.append(f"Thread {ident}{name} ({thread.status}), py-spy {f.dump_mode} dump, innermost frame first:")
            lines += [f"    {fr.label}" for fr in thread.frames[:FRAMES]]
            if len(thread.frames) > FRAMES:
                lines.append(f"    ... {len(thread.frames) - FRAMES} more frames")
            others = [t for t in f.threads if t is not thread]
            if others:
                lines.append(f"Other threads: {len(others)} ({sum(t.active for t in others)} active)")
            if thread.os_thread_id is not None:
                pl = proc_line(thread.os_thread_id, f.proc)
                if pl:
                    lines.append(pl)
        else:
            why = f.dump_error or ("py-spy saw no Python thread" if f.dump_mode else "py-spy was not run")
            lines.append(f"No Python stack: {why}")
            pl = proc_line(proc.pid, f.proc)
            if pl:
                lines.append(pl)
    lines.append("")

    if f.record_files:
        lines.append(f"Flame graph ({f.record_seconds} s, nonblocking): " + ", ".join(f.record_files))
    state = "complete" if not f.failures else f"partial, {len(f.failures)} failure(s)"
    lines.append(f"Capture: {f.file_count} files in {f.duration:.2f} s, {state}; details in capture.json")
    for key, reason in sorted(f.failures.items())[:10]:
        lines.append(f"  {key}: {reason}")
    if len(f.failures) > 10:
        lines.append(f"  ... {len(f.failures) - 10} more in capture.json")
    return "\n".join(lines) + "\n"

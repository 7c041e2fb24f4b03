"""Matches what an incident saw against the signature catalog (pure).

``Observation`` is everything known when the evidence is in: the incident kind,
the py-spy threads of the focus process (and which one is hot or blocked), log
lines, metric windows, the vLLM version, the accelerator utilisation, a parsed
crash, the command line and the focus process's role. ``diagnose`` returns the
matching signatures, best first, as ``Match`` objects.

How a signature is scored:
- the incident kind must be one of its ``kinds`` and the version inside ``versions``;
- its required clauses must all hold (``require: any``: at least one); a clause
  whose data is missing (no dump, no log) does not hold;
- confidence = the signature's confidence, + 0.05 per optional clause that holds
  (at most 0.99); halved, with a note, when the server runs a version at or
  after ``fixed_in`` (a regression, or another cause with the same look).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from vllm_guardian.bundle.pyspy import ThreadStack
from vllm_guardian.diagnosis.signature import (
    ExceptionPattern,
    FramePattern,
    Match,
    MetricPattern,
    Signature,
    ThreadPattern,
)
from vllm_guardian.diagnosis.version import parse_version

IDLE_UTILIZATION = 0.01  # at or below: "device idle"
OPTIONAL_BONUS = 0.05
MAX_CONFIDENCE = 0.99
MAX_LINE = 200


@dataclass(frozen=True)
class CrashFrame:
    file: str
    line: int
    function: str
    code: str = ""


@dataclass(frozen=True)
class Crash:
    """The last Python traceback of a log: exception type, message, frames (outermost first)."""

    exception: str
    message: str
    frames: tuple[CrashFrame, ...] = ()
    process: str | None = None  # vLLM's line prefix, e.g. "EngineCore_DP0"
    pid: int | None = None
    chain: tuple[str, ...] = ()  # earlier exceptions of the same report ("Type: message")
    text: str = ""  # the traceback as logged (prefixes removed), bounded
    followed_by: tuple[str, ...] = ()  # later reports that only echo it (the API server's EngineDeadError)

    def to_dict(self) -> dict:
        return {
            "exception": self.exception,
            "message": self.message,
            "process": self.process,
            "pid": self.pid,
            "frames": [{"file": f.file, "line": f.line, "function": f.function, "code": f.code} for f in self.frames],
            "chain": list(self.chain),
            "followed_by": list(self.followed_by),
            "text": self.text,
        }


@dataclass(frozen=True)
class Observation:
    kind: str
    threads: tuple[ThreadStack, ...] = ()  # py-spy threads of the focus process
    hot_tid: int | None = None  # the hot/blocked thread's Linux TID, when the detector named one
    log_lines: tuple[str, ...] = ()
    metrics: Mapping[str, Sequence[float]] = field(default_factory=dict)  # metric -> values, oldest first
    vllm_version: str | None = None
    device_utilization: float | None = None  # 0..1, busiest device of the target
    crash: Crash | None = None
    cmdline: str = ""
    role: str | None = None


# ---------------------------------------------------------------- primitives
def _fn_ok(p: FramePattern, name: str) -> bool:
    if p.functions and not any(name == f or name.endswith("." + f) for f in p.functions):
        return False
    return not (p.function_regex and not p.function_regex.search(name))


def _file_ok(p: FramePattern, filename: str) -> bool:
    path = filename.replace("\\", "/")
    if p.files and not any(path == s or path.endswith(s if s.startswith("/") else "/" + s) for s in p.files):
        return False
    return not (p.file_regex and not p.file_regex.search(path))


def frame_matches(p: FramePattern, name: str, filename: str) -> bool:
    return _fn_ok(p, name) and _file_ok(p, filename)


def _find_frame(p: FramePattern, frames: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """``frames`` innermost first as (function, file)."""
    scope = frames[: p.within] if p.within else frames
    return next(((n, f) for n, f in scope if frame_matches(p, n, f)), None)


def _stack(t: ThreadStack) -> list[tuple[str, str]]:
    return [(f.name, f.filename) for f in t.frames]


def _state_ok(state: str, t: ThreadStack) -> bool:
    return (
        state == "any"
        or (state == "active" and t.active)
        or (state == "idle" and not t.active)
        or (state == "gil" and t.active and t.owns_gil)
    )


def thread_matches(p: ThreadPattern, t: ThreadStack) -> tuple[bool, list[str], int]:
    """(required parts hold, what held, how many optional frames held)."""
    if p.name is not None and not (t.name and p.name.search(t.name)):
        return False, [], 0
    if not _state_ok(p.state, t):
        return False, [], 0
    stack = _stack(t)
    held: list[str] = []
    bonus = 0
    for fp in p.frames:
        hit = _find_frame(fp, stack)
        if hit is None:
            if not fp.optional:
                return False, [], 0
            continue
        bonus += fp.optional
        held.append(f"{hit[0]} ({_short(hit[1])})")
    return True, held, bonus


def _short(path: str, parts: int = 3) -> str:
    bits = path.replace("\\", "/").split("/")
    return "/".join(bits[-parts:])


def _thread_label(t: ThreadStack) -> str:
    return f'thread "{t.name or "?"}" ({t.status}' + (f", tid {t.os_thread_id})" if t.os_thread_id else ")")


def _metric_holds(p: MetricPattern, values: Sequence[float]) -> bool:
    if not values:
        return False
    last = values[-1]
    if p.op == ">":
        return last > p.value
    if p.op == ">=":
        return last >= p.value
    if p.op == "<":
        return last < p.value
    if p.op == "<=":
        return last <= p.value
    if p.op == "==":
        return abs(last - p.value) < 1e-9
    if len(values) < 2:
        return False
    if p.op == "flat":
        return max(values) - min(values) < 1e-9
    if p.op == "rising":
        return last > values[0]
    return last < values[0]  # falling


def _exception_holds(p: ExceptionPattern, c: Crash) -> tuple[bool, list[str]]:
    if p.types and c.exception.rsplit(".", 1)[-1] not in {t.rsplit(".", 1)[-1] for t in p.types}:
        return False, []
    if p.message is not None and not p.message.search(c.message):
        return False, []
    held = [f"exception {c.exception}" + (f": {c.message[:MAX_LINE]}" if c.message else "")]
    stack = [(f.function, f.file) for f in reversed(c.frames)]
    for fp in p.frames:
        hit = _find_frame(fp, stack)
        if hit is None:
            if not fp.optional:
                return False, []
            continue
        held.append(f"raised through {hit[0]} ({_short(hit[1])})")
    return True, held


# ---------------------------------------------------------------- one signature
def _hot_candidates(obs: Observation) -> list[ThreadStack]:
    if obs.hot_tid is not None:
        hot = [t for t in obs.threads if t.os_thread_id == obs.hot_tid]
        if hot:
            return hot
    return list(obs.threads)


class _Tally:
    """The clauses of one signature judged so far: which required ones held, how many optional
    ones did, and the evidence lines of those that held (in the signature's order)."""

    def __init__(self, kind: str) -> None:
        self.required_ok: list[bool] = []
        self.optional_hits = 0
        self.matched: list[str] = [f"incident kind {kind}"]

    def clause(self, ok: bool, optional: bool, lines: Iterable[str]) -> None:
        if ok:
            self.matched.extend(lines)
            if optional:
                self.optional_hits += 1
        if not optional:
            self.required_ok.append(ok)

    def passes(self, require: str) -> bool:
        """At least one clause held, and the required ones as ``require`` says (all / any)."""
        if not self.required_ok and self.optional_hits == 0:
            return False
        return not self.required_ok or (all(self.required_ok) if require == "all" else any(self.required_ok))


def _in_version_range(sig: Signature, obs: Observation, notes: list[str]) -> bool:
    """False when the server's vLLM is outside the signature's range; a version not understood
    is noted and not checked."""
    if not obs.vllm_version or not (sig.versions_min or sig.versions_below):
        return True
    try:
        v = parse_version(obs.vllm_version)
        if sig.versions_min and v < parse_version(sig.versions_min):
            return False
        if sig.versions_below and v >= parse_version(sig.versions_below):
            return False
    except ValueError:
        notes.append(f"vLLM version {obs.vllm_version!r} not understood: version range not checked")
    return True


def _judge_hot_thread(sig: Signature, obs: Observation, tally: _Tally) -> ThreadStack | None:
    """The hot (or focus) thread clause; the thread it matched, kept from the other thread clauses."""
    if sig.hot_thread is None:
        return None
    hit = None
    for t in _hot_candidates(obs):
        ok, held, bonus = thread_matches(sig.hot_thread, t)
        if ok:
            hit = (t, held, bonus)
            break
    if hit is None:
        tally.clause(False, sig.hot_thread.optional, ())
        return None
    tally.optional_hits += hit[2]
    what = "hot" if obs.kind == "busy_loop" else "focus"
    label = f"{what} {_thread_label(hit[0])}"
    tally.clause(True, sig.hot_thread.optional, [label + " in " + " ← ".join(hit[1])] if hit[1] else [label])
    return hit[0]


def _judge_threads(sig: Signature, obs: Observation, used: ThreadStack | None, tally: _Tally) -> None:
    """Each other thread clause: a thread (not the hot one) that matches, or none that does (``absent``)."""
    for tp in sig.threads:
        others = [t for t in obs.threads if t is not used]
        if tp.absent:
            ok = bool(obs.threads) and not any(thread_matches(tp, t)[0] for t in others)
            name = tp.name.pattern if tp.name else "such"
            tally.clause(ok, tp.optional, [f"no thread {name!r} in the dump"])
            continue
        other = next(((t, r) for t in others for r in [thread_matches(tp, t)] if r[0]), None)
        if other is None:
            tally.clause(False, tp.optional, ())
            continue
        thread, (_ok, held, bonus) = other
        tally.optional_hits += bonus
        tally.clause(True, tp.optional, [_thread_label(thread) + (" in " + " ← ".join(held) if held else "")])


def _judge_logs_and_metrics(sig: Signature, obs: Observation, tally: _Tally) -> None:
    for lp in sig.logs:
        line = next((ln for ln in obs.log_lines if lp.regex.search(ln)), None)
        tally.clause(line is not None, lp.optional, [f"log: {line.strip()[:MAX_LINE]}"] if line else ())
    for mp in sig.metrics:
        vals = obs.metrics.get(mp.metric, ())
        ok = _metric_holds(mp, vals)
        tally.clause(ok, mp.optional, [f"metric {mp.describe()} (last {vals[-1]:g})"] if ok and vals else ())


def _judge_exception(sig: Signature, obs: Observation, tally: _Tally) -> None:
    if sig.exception is None:
        return
    if obs.crash is None:
        tally.clause(False, sig.exception.optional, ())
        return
    ok, held = _exception_holds(sig.exception, obs.crash)
    tally.clause(ok, sig.exception.optional, held)


def _judge_process(sig: Signature, obs: Observation, tally: _Tally) -> None:
    """The process clauses: its command line, its role, its device idle while it spins."""
    if sig.cmdline is not None:
        m = sig.cmdline.search(obs.cmdline or "")
        tally.clause(m is not None, False, [f"command line has {m.group(0)!r}"] if m else ())
    if sig.roles:
        ok = obs.role in sig.roles
        tally.clause(ok, False, [f"process role {obs.role}"] if ok else ())
    if sig.device_idle:
        u = obs.device_utilization
        ok = u is not None and u <= IDLE_UTILIZATION
        tally.clause(
            ok,
            sig.device_idle_optional,
            [f"device idle while the engine spins (accelerator {u * 100:.0f} %)"] if ok and u is not None else (),
        )


def _confidence(sig: Signature, obs: Observation, optional_hits: int, notes: list[str]) -> float:
    """The signature's confidence, raised per optional clause held, halved on a version where it is fixed."""
    conf = min(MAX_CONFIDENCE, sig.confidence + OPTIONAL_BONUS * optional_hits)
    if sig.fixed_in and obs.vllm_version:
        try:
            if parse_version(obs.vllm_version) >= parse_version(sig.fixed_in):
                conf /= 2
                notes.append(
                    f"this server runs vLLM {obs.vllm_version}, where it is fixed ({sig.fixed_in}): "
                    "a regression, or another cause that looks the same"
                )
            else:
                notes.append(f"this server runs vLLM {obs.vllm_version}; fixed in {sig.fixed_in}")
        except ValueError:
            pass
    return conf


def match_signature(sig: Signature, obs: Observation) -> Match | None:
    """The signature judged against what was observed, clause by clause; None when it does not hold."""
    notes: list[str] = []
    if obs.kind not in sig.kinds or not _in_version_range(sig, obs, notes):
        return None
    tally = _Tally(obs.kind)
    used = _judge_hot_thread(sig, obs, tally)
    _judge_threads(sig, obs, used, tally)
    _judge_logs_and_metrics(sig, obs, tally)
    _judge_exception(sig, obs, tally)
    _judge_process(sig, obs, tally)
    if not tally.passes(sig.require):
        return None
    conf = _confidence(sig, obs, tally.optional_hits, notes)
    return Match(
        sig.id,
        sig.title,
        round(conf, 2),
        tuple(tally.matched),
        sig.references,
        sig.workaround,
        sig.fixed_in,
        sig.advice,
        sig.source,
        sig.confirmed,
        sig.inferred,
        sig.catalog,
        tuple(notes),
    )


def diagnose(signatures: Iterable[Signature], obs: Observation) -> list[Match]:
    """Every signature that fits, best first (confidence, then more clauses held, then id)."""
    out = [m for m in (match_signature(s, obs) for s in signatures) if m is not None]
    return sorted(out, key=lambda m: (-m.confidence, -len(m.matched), m.id))


def device_idle_note(kind: str, utilization: float | None) -> str | None:
    """The seeds' signature in words, for any busy_loop whose device sits at ~0 %."""
    if kind == "busy_loop" and utilization is not None and utilization <= IDLE_UTILIZATION:
        return f"device idle while the engine spins (accelerator {utilization * 100:.0f} %)"
    return None

"""Escalate on recurrence (docs/policy.md, Recurrence): the same kind — and the same catalog
signature when one matched; the same signature under another kind counts too — on the same target
within ``recurrence.window`` seconds after a verified restart is not restarted blindly again. The
answer is ``restart`` (nothing recurs), ``escalate`` (alert "recurring", both incidents linked) or
``workaround`` (the profile allows the catalog's workaround and the restart method owns the command
line). Pure: history in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema_policy import RecurrenceConfig

# The restart methods whose command line the guardian owns (the workaround can be applied there).
WORKAROUND_METHODS = ("command", "systemd")


@dataclass(frozen=True)
class VerifiedRestart:
    """A restart that passed verify: which incident it ended, of what kind and signature, when."""

    incident_id: str
    kind: str
    signature: str | None
    at: float


@dataclass(frozen=True)
class RecurrenceVerdict:
    action: str  # restart | escalate | workaround
    reason: str
    previous: str | None = None  # the incident this one repeats (linked in the alert)


def _same(previous: VerifiedRestart, kind: str, signature: str | None) -> bool:
    """The same fault: both diagnosed as one catalog signature (whichever detector named it: a spin
    starved of CPU can read as an engine stall), else the same kind with no signature against it."""
    if previous.signature is not None and signature is not None:
        return previous.signature == signature
    return previous.kind == kind


def judge(
    cfg: RecurrenceConfig,
    *,
    history: list[VerifiedRestart],
    kind: str,
    signature: str | None,
    now: float,
    restart_method: str,
    has_workaround: bool,
) -> RecurrenceVerdict:
    """What to do with a new incident of ``kind`` on a target whose verified restarts are ``history``."""
    recent = [r for r in history if 0 <= now - r.at < cfg.window and _same(r, kind, signature)]
    if not recent:
        return RecurrenceVerdict("restart", "no verified restart of the same fault within the window")
    last = max(recent, key=lambda r: r.at)
    what = f"{kind}" + (f" ({signature})" if signature else "")
    ago = f"{now - last.at:.0f}s after the verified restart ending {last.incident_id}"
    if cfg.apply_workaround and has_workaround and restart_method in WORKAROUND_METHODS:
        return RecurrenceVerdict("workaround", f"recurring {what} {ago}: restart with the workaround", last.incident_id)
    why = ""
    if cfg.apply_workaround and not has_workaround:
        why = "; the catalog knows no workaround for it"
    elif cfg.apply_workaround:
        why = f"; restart.mode {restart_method} does not let the guardian change the command line (patch proposed)"
    return RecurrenceVerdict("escalate", f"recurring {what} {ago}: no second blind restart{why}", last.incident_id)

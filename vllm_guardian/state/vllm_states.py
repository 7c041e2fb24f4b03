"""What a vLLM server says of itself: its version and its own states, kept per incarnation (pure state).

Fed by the vllm_state probe (``probes/vllm_state.py``): the ``/version`` answer (read once per
incarnation), the 0.34 ``/checkpoint/status`` state, the fault-tolerance status per engine, and
whether the elastic-EP middleware refuses the rank as retired. Decides the guardian's phase of
vLLM's own states (docs/vllm-versions.md):

- ``checkpointing`` (preparing / prepared / restoring): the tracker turns it into a hold, as a
  pause (the hang detectors stand down, ``lifecycle.max_pause`` limits it);
- ``checkpoint_failed``: vLLM's checkpoint failed (an incident: ``detectors/checkpoint_failed.py``);
- ``recovering``: an engine in vLLM's own fault-tolerance round (DIAGNOSING / UNHEALTHY); the
  guardian stands down for it until vLLM's ``engine_recovery_timeout_sec`` (120 s) plus
  ``lifecycle.recovery_grace`` from when it first saw the round, then judges it; an engine vLLM
  reports DEAD is ``engine_dead``;
- ``retired``: an elastic-EP rank retired on purpose (its API server keeps ``/health`` 200).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vllm_guardian import vllm_versions as vv
from vllm_guardian.model import ProcKey, Role, Target


@dataclass(frozen=True)
class VllmAnswers:
    """One reading of a server's own state endpoints (``probes/vllm_state.py``); None: not asked or
    no usable answer (a timeout, a malformed body): never a state."""

    target: str
    key: ProcKey
    version: str | None = None  # the /version answer's "version" (only when asked)
    version_read: bool = False  # /version was asked and answered (200) this time
    retired: bool | None = None  # the elastic-EP middleware's 503 for a retired rank (None: not known)
    checkpoint: str | None = None  # vLLM's checkpoint state word, when its status code confirms it
    checkpoint_absent: bool = False  # the checkpoint status path answers 404: not offered
    engines: Mapping[int, str] | None = None  # engine index -> vLLM's FT status word (lower case)
    ft_absent: bool = False  # the fault-tolerance status path answers 404: not on


@dataclass
class VllmFacts:
    """What the guardian keeps of one incarnation's own states (mutable: the tracker owns it)."""

    key: ProcKey
    version: str | None = None
    version_read: bool = False
    checkpoint: str | None = None  # vLLM's state word; None: not offered or never answered
    checkpoint_absent: bool = False
    ft_absent: bool = False
    engines: dict[int, str] = field(default_factory=dict)  # engine -> FT status word
    round_since: dict[int, float] = field(default_factory=dict)  # engine -> when its round was first seen
    retired: bool = False

    @property
    def match(self) -> vv.CapabilityMatch:
        return vv.capabilities_for(self.version)

    @property
    def checkpoint_phase(self) -> str | None:
        """``checkpointing`` / ``checkpoint_failed`` / ``running``, or None when not known."""
        if self.checkpoint is None:
            return None
        if self.checkpoint == "failed":
            return vv.CHECKPOINT_FAILED
        return vv.RUNNING if self.checkpoint == "running" else vv.CHECKPOINTING

    def rounds(self, now: float, grace_s: float) -> tuple[dict[int, float], dict[int, float]]:
        """(engines within vLLM's own round, engines past its timeout + grace): engine -> seconds in it."""
        within: dict[int, float] = {}
        overdue: dict[int, float] = {}
        for engine, since in self.round_since.items():
            deadline = vv.recovery_deadline(since, grace_s=grace_s)
            (within if now < deadline else overdue)[engine] = round(now - since, 1)
        return within, overdue

    @property
    def dead(self) -> tuple[int, ...]:
        """Engines vLLM's fault tolerance reports DEAD."""
        return tuple(sorted(e for e, s in self.engines.items() if s == "dead"))

    def phase(self, now: float, grace_s: float) -> str | None:
        """The guardian's phase of vLLM's own state: retired, checkpointing, checkpoint_failed,
        recovering (an engine within its round), or None."""
        if self.retired:
            return vv.RETIRED
        cp = self.checkpoint_phase
        if cp in (vv.CHECKPOINTING, vv.CHECKPOINT_FAILED):
            return cp
        if self.rounds(now, grace_s)[0]:
            return vv.RECOVERING
        return None


def fold(facts: VllmFacts, ans: VllmAnswers, now: float) -> list[str]:
    """Take one reading into ``facts``; what changed, in words (logged once each)."""
    out: list[str] = []
    if ans.version_read and not facts.version_read:
        facts.version, facts.version_read = ans.version, True
        match = facts.match
        out.append(f"vLLM {ans.version or '?'} (capability row {match.row.since})")
        if match.notice:
            out.append(match.notice)
    if ans.checkpoint_absent:
        facts.checkpoint_absent, facts.checkpoint = True, None
    if ans.ft_absent:
        facts.ft_absent = True
        facts.engines, facts.round_since = {}, {}
    if ans.retired is not None and ans.retired != facts.retired:
        facts.retired = ans.retired
        out.append("retired on purpose by elastic EP: judged no more" if ans.retired else "no longer retired")
    if ans.checkpoint is not None and ans.checkpoint != facts.checkpoint:
        was, facts.checkpoint = facts.checkpoint, ans.checkpoint
        out.append(f"vLLM checkpoint {was or 'unknown'} -> {ans.checkpoint}")
    if ans.engines is not None:
        out.extend(_fold_engines(facts, ans.engines, now))
    return out


def _fold_engines(facts: VllmFacts, engines: Mapping[int, str], now: float) -> list[str]:
    out = []
    for engine, status in sorted(engines.items()):
        was = facts.engines.get(engine)
        if status == was:
            continue
        in_round = status in ("diagnosing", "unhealthy")
        if in_round and engine not in facts.round_since:
            facts.round_since[engine] = now
            out.append(f"engine {engine}: vLLM's own fault-tolerance round ({status}): the guardian stands down")
        elif not in_round:
            since = facts.round_since.pop(engine, None)
            took = "" if since is None else f" after {now - since:.0f}s"
            out.append(f"engine {engine}: vLLM's fault tolerance says {status}{took}")
        facts.engines[engine] = status
    return out


@dataclass(frozen=True)
class VllmStatus:
    """A target's ``vllm`` status section: its version, the row used, and vLLM's own states."""

    version: str | None  # what /version said (None: not read yet)
    row: str  # the capability row's first release
    notice: str | None  # the row is a guess (unknown newer, unread or older version)
    phase: str | None  # retired | checkpointing | checkpoint_failed | recovering | None
    checkpoint: str | None  # vLLM's checkpoint state word
    engines: Mapping[str, str] = field(default_factory=dict)  # engine -> vLLM's FT status word
    recovering: Mapping[str, float] = field(default_factory=dict)  # engine -> seconds in its round
    sees: tuple[str, ...] = ()  # what the guardian can see of this server
    blind: tuple[str, ...] = ()  # what it cannot (a --grpc server has no /metrics)


def status_of(facts: VllmFacts | None, now: float, grace_s: float, *, grpc: bool) -> VllmStatus:
    """The status section (a server never read: the oldest row, no notice until /version answers)."""
    match = vv.capabilities_for(facts.version if facts else None)
    sees, blind = vv.visibility(match.row, grpc=grpc)
    if facts is None:
        return VllmStatus(None, match.row.since, None, None, None, sees=sees, blind=blind)
    within = facts.rounds(now, grace_s)[0]
    return VllmStatus(
        version=facts.version,
        row=match.row.since,
        notice=match.notice if facts.version_read else None,
        phase=facts.phase(now, grace_s),
        checkpoint=facts.checkpoint,
        engines={str(k): v for k, v in sorted(facts.engines.items())},
        recovering={str(k): v for k, v in sorted(within.items())},
        sees=sees,
        blind=blind,
    )


def serves_grpc(target: Target) -> bool:
    """The target's API server was started with ``--grpc`` (``vllm serve --grpc``): no ``/metrics``,
    ``grpc.health.v1`` instead of ``/health``. Read from its command line: it changes what the guardian
    says it can see (status), never what it does on its own."""
    api = next((p for p in target.processes if p.key == target.key), None)
    if api is None:
        api = next(iter(target.by_role(Role.API_SERVER)), None)
    return api is not None and "--grpc" in api.cmdline

"""What the guardian remembers about each target between ticks (pure state, no I/O).

Fed by discovery results (every few seconds), the procfs probe's "gone" set
(every tick: a vanished API server or EngineCore is noticed within one tick)
and canary results (readiness). It keeps the *snapshotted tree* of a target:
processes that were in the tree stay in it while they live, even after being
re-parented (their API server SIGKILLed), so a later stop reaches them.
It decides: a target is new, restarted (same name, new API-server identity),
gone (API server vanished) or forgotten (gone longer than ``forget_after``); and it keeps what is
on purpose: a pause or sleep the server reports, an operator's drain the loop hands it
(``operator_drain``), each with when it ended (the resume grace).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from vllm_guardian.detectors.view import TargetState
from vllm_guardian.config.schema import Config, LifecycleConfig
from vllm_guardian.model import Finding, Kind, ProcKey, ProcessInfo, Role, Target, TargetRef
from vllm_guardian.vllm_versions import CHECKPOINTING
from vllm_guardian.state.vllm_states import VllmAnswers, VllmFacts, fold as fold_vllm, serves_grpc


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(float(x), nd)


if TYPE_CHECKING:  # the probes' readings, kept here for status: annotations only
    from vllm_guardian.state.readings import CanaryResult, HttpScrape


@dataclass(frozen=True)
class HealthStatus:
    """A target's ``health`` status section: its latest ``/health`` answer."""

    status: int | None  # HTTP status of /health, None when it did not answer
    error: str | None
    latency_s: float | None


@dataclass(frozen=True)
class CanaryStatus:
    """A target's ``canary`` status section: its latest canary completion."""

    ok: bool
    timed_out: bool
    latency_s: float | None
    error: str | None
    age_s: float | None


@dataclass
class TrackedTarget:
    target: Target
    first_seen: float
    model: str | None = None
    ready: bool = False
    ready_since: float | None = None
    ever_ready: bool = False
    answered: bool = False  # this incarnation has answered a canary (what a restart is verified by)
    starting_since: float | None = None  # when this incarnation was first seen (startup limit)
    api_alive: bool = True
    gone_since: float | None = None
    engine_seen: bool = False
    canary_in_flight_since: float | None = None
    last_canary_start: float | None = None
    restarts_seen: int = 0
    last_scrape: HttpScrape | None = None  # latest /health + /metrics (status, evidence)
    last_canary: CanaryResult | None = None  # latest canary answer (status)
    # "paused" / "sleeping" / "checkpointing": on purpose, said by the server (/is_paused, /is_sleeping,
    # vLLM 0.34's /checkpoint/status)
    hold: str | None = None
    server_hold: str | None = None  # what /is_paused and /is_sleeping say ("paused" / "sleeping")
    vllm: VllmFacts | None = None  # this incarnation's version and vLLM's own states (state/vllm_states.py)
    hold_since: float | None = None
    hold_ended: float | None = None  # when the last hold ended (the resume grace runs from it)
    held_since: float | None = None  # start of the unbroken run of holds, each begun within the grace of the last
    drained_since: float | None = None  # out of rotation by the operator (`guardian drain`) since
    drain_ended: float | None = None  # when the operator's last drain ended (`guardian undrain`)
    # reason -> count of what its /metrics pages lost (probes/vllm_http.py): engines, refused pages
    metrics_dropped: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.target.name

    def health_section(self, latency_s: float | None) -> HealthStatus | None:
        """The latest ``/health`` answer (None before the first scrape); ``latency_s`` from the series."""
        scrape = self.last_scrape
        if scrape is None:
            return None
        return HealthStatus(scrape.health_status, scrape.health_error, _r(latency_s, 4))

    def canary_section(self, now: float) -> CanaryStatus | None:
        """The latest canary answer (None before the first)."""
        c = self.last_canary
        if c is None:
            return None
        return CanaryStatus(c.ok, c.timed_out, _r(c.latency, 4), c.error, _r(now - c.ended, 1))

    def ref(self, findings: dict[Kind, Finding | None]) -> TargetRef:
        """The target as an incident records it; ``role``: of the process a finding points at."""
        role = next(
            (str(f.signals["role"]) for f in findings.values() if f is not None and f.signals.get("role")), None
        )
        key = self.target.key
        t = self.target
        return TargetRef(self.name, key.pid, key.starttime, t.port, self.model, role, t.namespace, t.pod)

    @property
    def grpc(self) -> bool:
        """A ``--grpc`` server: no HTTP (/health, /metrics, canary); judged from /proc and accelerators."""
        return serves_grpc(self.target)

    @property
    def retired(self) -> bool:
        """An elastic-EP rank vLLM retired on purpose (its API server refuses all but /health)."""
        return self.vllm is not None and self.vllm.retired

    @property
    def engine_alive(self) -> bool | None:
        if not self.engine_seen:
            return None
        return any(p.role is Role.ENGINE_CORE for p in self.target.processes)


@dataclass(frozen=True)
class Changes:
    new: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    vanished: tuple[str, ...] = ()
    forgotten: tuple[str, ...] = ()


class Tracker:
    def __init__(
        self,
        forget_after: float,
        configured_models: dict[str, str] | None = None,
        probe_interval: float = 1.0,
        lifecycle: LifecycleConfig | None = None,
    ) -> None:
        self.forget_after = forget_after
        self.lifecycle = lifecycle or LifecycleConfig()
        self.configured_models = configured_models or {}
        self.probe_interval = probe_interval  # how often the processes are read (detectors judge gaps by it)
        self.targets: dict[str, TrackedTarget] = {}

    @classmethod
    def from_config(cls, cfg: Config) -> Tracker:
        return cls(
            cfg.discovery.forget_after,
            {t.name: t.model for t in cfg.targets if t.model},
            cfg.probes.procfs.interval,
            cfg.lifecycle,
        )

    def reconfigure(self, cfg: Config) -> None:
        """A config reload: the settings ``from_config`` reads; what is tracked stays."""
        self.forget_after = cfg.discovery.forget_after
        self.configured_models = {t.name: t.model for t in cfg.targets if t.model}
        self.probe_interval = cfg.probes.procfs.interval
        self.lifecycle = cfg.lifecycle

    # ------------------------------------------------------------------ discovery
    def apply_discovery(self, targets: tuple[Target, ...], orphans: tuple[ProcessInfo, ...], now: float) -> Changes:
        new, restarted, vanished, forgotten = [], [], [], []
        alive_orphans = {p.key: p for p in orphans}
        found = {t.name: t for t in targets}
        for name, t in found.items():
            tr = self.targets.get(name)
            if tr is None:
                tr = self.targets[name] = TrackedTarget(
                    t, now, model=self.configured_models.get(name), starting_since=now
                )
                new.append(name)
            elif tr.target.key != t.key:
                restarted.append(name)
                tr.target = t
                tr.ready, tr.ready_since = False, None
                tr.starting_since = now
                tr.answered = False
                tr.hold, tr.hold_since, tr.hold_ended, tr.held_since = None, None, None, None
                tr.server_hold, tr.vllm = None, None
                tr.api_alive, tr.gone_since = True, None
                tr.engine_seen = False
                tr.canary_in_flight_since = None
                tr.model = self.configured_models.get(name)
                tr.restarts_seen += 1
            else:
                tr.target = self._keep_orphans(tr.target, t, alive_orphans)
                tr.api_alive, tr.gone_since = True, None
            tr.engine_seen = tr.engine_seen or bool(tr.target.by_role(Role.ENGINE_CORE))
            listening = tr.target.port_verified and tr.target.socket != "starting"
            if tr.grpc and not tr.ready and tr.engine_seen and listening and tr.api_alive:
                # no /health to ask: a --grpc server listens once its engine is up (its socket, seen)
                tr.ready, tr.ready_since, tr.ever_ready = True, now, True
        for name, tr in list(self.targets.items()):
            if name in found:
                continue
            if tr.api_alive:
                tr.api_alive, tr.gone_since = False, now
                vanished.append(name)
            # what is left of a vanished target: its processes that still live, re-parented
            tr.target = replace(
                tr.target,
                processes=tuple(alive_orphans.get(p.key, p) for p in tr.target.processes if p.key in alive_orphans),
            )
            if (
                tr.target.source != "config"
                and tr.gone_since is not None
                and now - tr.gone_since >= self.forget_after
                and not tr.target.processes
            ):
                del self.targets[name]
                forgotten.append(name)
        return Changes(tuple(new), tuple(restarted), tuple(vanished), tuple(forgotten))

    @staticmethod
    def _keep_orphans(old: Target, new: Target, alive_orphans: dict[ProcKey, ProcessInfo]) -> Target:
        keys = {p.key for p in new.processes}
        kept = tuple(alive_orphans[p.key] for p in old.processes if p.key not in keys and p.key in alive_orphans)
        return replace(new, processes=new.processes + kept) if kept else new

    # ------------------------------------------------------------------ per tick
    def mark_gone(self, keys: set[ProcKey], now: float) -> list[str]:
        """Drop vanished processes from every tree; return targets whose API server vanished."""
        lost_api: list[str] = []
        if not keys:
            return lost_api
        for tr in self.targets.values():
            if not any(tr.target.has(k) for k in keys):
                continue
            tr.target = replace(tr.target, processes=tuple(p for p in tr.target.processes if p.key not in keys))
            if tr.api_alive and tr.target.key in keys:
                tr.api_alive, tr.gone_since = False, now
                tr.ready = False
                lost_api.append(tr.name)
        return lost_api

    def canary_started(self, name: str, now: float) -> None:
        tr = self.targets.get(name)
        if tr:
            tr.canary_in_flight_since = now
            tr.last_canary_start = now

    def canary_finished(self, name: str, key: ProcKey, ok: bool, model: str | None, now: float) -> None:
        tr = self.targets.get(name)
        if tr is None:
            return
        tr.canary_in_flight_since = None
        if tr.target.key != key:
            return  # an answer from the previous incarnation says nothing about this one
        if model and not tr.model:
            tr.model = model
        if ok and tr.api_alive:
            tr.answered = True
        if ok and not tr.ready and tr.api_alive:
            tr.ready, tr.ready_since, tr.ever_ready = True, now, True

    def server_says_ready(self, name: str, key: ProcKey, model: str, now: float) -> bool:
        """``/health`` 200 and ``/v1/models`` answered by this incarnation: warm, whether or not
        this guardian saw it start (vLLM listens only once its engine is ready). True when it
        made the target ready."""
        tr = self.targets.get(name)
        if tr is None or tr.ready or not tr.api_alive or tr.target.key != key:
            return False
        if not tr.model:
            tr.model = model
        tr.ready, tr.ready_since, tr.ever_ready = True, now, True
        return True

    def server_state(
        self, name: str, key: ProcKey, paused: bool | None, sleeping: bool | None, now: float
    ) -> str | None:
        """What the server says of a pause or sleep on purpose; a change, in words, or None.
        Asleep wins over paused (a sleeping vLLM is paused too); no answer is not a hold."""
        tr = self.targets.get(name)
        if tr is None or tr.target.key != key:
            return None  # an answer from the previous incarnation
        tr.server_hold = "sleeping" if sleeping else "paused" if paused else None
        return self._hold(tr, now)

    def vllm_state(self, ans: VllmAnswers, now: float) -> list[str]:
        """What the server says of its version and vLLM's own states (``state/vllm_states.py``);
        the changes, in words. A checkpoint in progress is a hold, as a pause."""
        tr = self.targets.get(ans.target)
        if tr is None or tr.target.key != ans.key:
            return []  # an answer from the previous incarnation
        if tr.vllm is None:
            tr.vllm = VllmFacts(ans.key)
        out = fold_vllm(tr.vllm, ans, now)
        change = self._hold(tr, now)
        return out + ([change] if change else [])

    def vllm_facts(self, key: ProcKey) -> VllmFacts | None:
        return next((tr.vllm for tr in self.targets.values() if tr.target.key == key), None)

    def _hold(self, tr: TrackedTarget, now: float) -> str | None:
        """Set the target's hold from what the server says (a checkpoint wins over a pause); a change,
        in words, or None."""
        checkpointing = tr.vllm is not None and tr.vllm.checkpoint_phase == CHECKPOINTING
        hold = "checkpointing" if checkpointing else tr.server_hold
        if hold == tr.hold:
            return None
        was, since = tr.hold, tr.hold_since
        if hold is not None and was is None and not self._in_grace(tr.hold_ended, now):
            tr.held_since = now  # a new run of holds (a pause begun within the last one's grace continues it)
        tr.hold, tr.hold_since = hold, (now if hold else None)
        if was is not None:
            tr.hold_ended = now
        if hold is None:
            return (
                f"{was} for {now - (since or now):.0f}s, resumed (hang detectors wait {self.lifecycle.resume_grace:g}s)"
            )
        return f"{hold} on purpose (the server says so): hang detectors stand down"

    def _in_grace(self, ended: float | None, now: float) -> bool:
        return ended is not None and now - ended < self.lifecycle.resume_grace

    def operator_drain(self, name: str, drained: bool, now: float) -> str | None:
        """Whether the operator has the target drained (``guardian drain``, until ``guardian
        undrain``); a change, in words, or None."""
        tr = self.targets.get(name)
        if tr is None or drained == (tr.drained_since is not None):
            return None
        if drained:
            tr.drained_since = now
            return "drained by the operator (guardian drain): hang detectors stand down until undrained"
        since, tr.drained_since, tr.drain_ended = tr.drained_since or now, None, now
        return f"undrained after {now - since:.0f}s (hang detectors wait {self.lifecycle.resume_grace:g}s)"

    def state(self, name: str, now: float, probe_interval: float | None = None) -> TargetState:
        tr = self.targets[name]
        facts, grace = tr.vllm, self.lifecycle.recovery_grace
        within, overdue = facts.rounds(now, grace) if facts else ({}, {})
        return TargetState(
            target=tr.target,
            now=now,
            ready=tr.ready,
            ever_ready=tr.ever_ready,
            api_alive=tr.api_alive,
            gone_since=tr.gone_since,
            engine_alive=tr.engine_alive,
            canary_in_flight_since=tr.canary_in_flight_since,
            probe_interval=self.probe_interval if probe_interval is None else probe_interval,
            ready_since=tr.ready_since,
            starting_since=tr.starting_since,
            lifecycle=self.lifecycle,
            hold=tr.hold,
            hold_since=tr.hold_since,
            hold_ended=tr.hold_ended,
            held_since=tr.held_since if tr.hold is not None or self._in_grace(tr.hold_ended, now) else None,
            drained=tr.drained_since is not None,
            drain_ended=tr.drain_ended,
            vllm_phase=facts.phase(now, grace) if facts else None,
            recovering=tuple(sorted(within.items())),
            overdue=tuple(sorted(overdue.items())),
            ft_dead=facts.dead if facts else (),
            grpc=tr.grpc,
        )

    def live_targets(self) -> list[Target]:
        return [tr.target for tr in self.targets.values() if tr.target.processes]

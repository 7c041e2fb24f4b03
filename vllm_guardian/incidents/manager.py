"""The incident state machine: hysteresis, dedupe, lifecycle, persistence.

Reads the detectors' findings per target per tick and decides when an incident
opens or resolves, per (node, target, kind):

- a *confirmed* finding counts positive, ``None`` counts negative, an
  *unconfirmed* finding (a suspect) counts neither and resets nothing;
- ``open_after`` consecutive positives open an incident, ``resolve_after``
  consecutive negatives resolve it (both from the kind's config block);
- while open, further positives open nothing new; their signals are kept in
  memory (``latest_signals``).

Every transition and every change (evidence, actions) is persisted through the
store; open incidents are reloaded at construction, so a guardian restart does
not duplicate them. A failed write is logged, never raised into the tick loop.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Action, Finding, Incident, Kind, Status, TargetRef, Transition
from vllm_guardian.incidents.ids import IdGenerator
from vllm_guardian.incidents.store import IncidentStore

log = logging.getLogger(__name__)

_Key = tuple[str, str, Kind]  # (node, target name, kind)


@dataclass
class _Streak:
    positive: int = 0
    negative: int = 0


class IncidentManager:
    def __init__(
        self,
        node: str,
        clock: Clock,
        store: IncidentStore | None,
        detectors_cfg: DetectorsConfig,
        *,
        recent_limit: int = 200,
        new_id: Callable[[float], str] | None = None,
    ) -> None:
        self.node = node
        self._clock = clock
        self._store = store
        self._cfg = detectors_cfg
        self._new_id = new_id or IdGenerator()
        self._lock = threading.RLock()
        self._open: dict[_Key, Incident] = {}
        self._resolved: deque[Incident] = deque(maxlen=max(1, recent_limit))
        self._streaks: dict[tuple[str, Kind], _Streak] = {}
        self._latest: dict[str, Mapping[str, Any]] = {}
        self._missing_since: dict[str, float] = {}  # target name -> when its open incident was first seen orphaned
        if store is not None:
            for inc in store.load_open():
                self._open.setdefault((inc.node, inc.target.name, inc.kind), inc)

    # ------------------------------------------------------------ thresholds
    def thresholds(self, kind: Kind) -> tuple[int, int]:
        """``(open_after, resolve_after)`` for a kind (1, 1 when its block has none)."""
        block = getattr(self._cfg, kind.value, None)
        return (max(1, int(getattr(block, "open_after", 1))), max(1, int(getattr(block, "resolve_after", 1))))

    # ------------------------------------------------------------ updates
    def update(self, target_name: str, ref: TargetRef, findings: Mapping[Kind, Finding | None]) -> list[Transition]:
        """Feed one tick's findings for one target; kinds absent from ``findings`` are untouched."""
        out: list[Transition] = []
        with self._lock:
            for kind, finding in findings.items():
                tr = self._update_one(target_name, ref, kind, finding)
                if tr is not None:
                    out.append(tr)
        return out

    def _update_one(self, target: str, ref: TargetRef, kind: Kind, finding: Finding | None) -> Transition | None:
        open_after, resolve_after = self.thresholds(kind)
        streak = self._streaks.setdefault((target, kind), _Streak())
        if finding is None:
            streak.negative += 1
            streak.positive = 0
        elif finding.confirmed:
            streak.positive += 1
            streak.negative = 0
        key = (self.node, target, kind)
        current = self._open.get(key)
        if current is not None:
            if finding is not None and finding.confirmed:
                self._latest[current.id] = dict(finding.signals)
            if finding is None and streak.negative >= resolve_after:
                reason = f"cleared: {streak.negative} consecutive negative evaluations"
                return self._close(key, reason)
            return None
        if finding is not None and finding.confirmed and streak.positive >= open_after:
            return self._open_new(key, ref, finding)
        return None

    def _open_new(self, key: _Key, ref: TargetRef, finding: Finding) -> Transition:
        wall = self._clock.wall()
        role = finding.signals.get("role")
        inc = Incident(
            id=self._new_id(wall),
            kind=finding.kind,
            severity=finding.severity,
            node=self.node,
            target=replace(ref, name=key[1], role=str(role)) if role else replace(ref, name=key[1]),
            status=Status.FIRING,
            summary=finding.summary,
            opened_at=wall,
            signals=dict(finding.signals),
        )
        self._open[key] = inc
        self._latest[inc.id] = dict(finding.signals)
        self._persist(inc)
        return Transition(incident=inc, previous=None)

    def _close(self, key: _Key, reason: str) -> Transition:
        inc = self._open.pop(key)
        done = inc.resolve(self._clock.wall(), reason)
        self._resolved.append(done)
        self._latest.pop(inc.id, None)
        self._persist(done)
        return Transition(incident=done, previous=inc.status)

    def reconfigure(self, detectors_cfg: DetectorsConfig) -> None:
        """New thresholds (a config reload): open incidents and streaks are kept."""
        with self._lock:
            self._cfg = detectors_cfg

    def resolve_target(self, target_name: str, reason: str) -> list[Transition]:
        """Resolve every open incident of a target (e.g. a forgotten target), now."""
        with self._lock:
            keys = [k for k, inc in self._open.items() if inc.target.name == target_name]
            out = [self._close(k, reason) for k in sorted(keys, key=lambda k: self._open[k].opened_at)]
            for sk in [sk for sk in self._streaks if sk[0] == target_name]:
                del self._streaks[sk]
            return out

    def resolve_missing(self, present: set[str], now: float, grace: float) -> list[Transition]:
        """Resolve open incidents whose target has not been known (configured or discovered) for
        ``grace`` seconds: an incident reloaded at start-up for a target that is gone for good
        would otherwise stay firing, re-notified forever."""
        with self._lock:
            missing_since = self._missing_since
            for name in list(missing_since):
                if name in present:
                    del missing_since[name]
            names = {inc.target.name for inc in self._open.values()} - present
            out: list[Transition] = []
            for name in sorted(names):
                since = missing_since.setdefault(name, now)
                if now - since >= grace:
                    del missing_since[name]
                    out += self.resolve_target(name, f"target no longer exists (unseen for {grace:g}s)")
            return out

    # ------------------------------------------------------------ queries
    def open_incidents(self) -> list[Incident]:
        with self._lock:
            return sorted(self._open.values(), key=lambda i: (i.opened_at, i.id))

    def get(self, incident_id: str) -> Incident | None:
        """An open or recently resolved incident, else the stored one (None when unknown)."""
        with self._lock:
            found = self._find(incident_id)
            if found is not None:
                return found
        if self._store is None:
            return None
        try:
            return self._store.load(incident_id)
        except ValueError:
            return None

    def recent(self, limit: int = 50) -> list[Incident]:
        """Open and recently resolved incidents (kept in memory), newest first."""
        with self._lock:
            both = list(self._open.values()) + list(self._resolved)
        both.sort(key=lambda i: (i.opened_at, i.id), reverse=True)
        return both[: max(0, limit)]

    def latest_signals(self, incident_id: str) -> Mapping[str, Any] | None:
        """Signals of the latest confirmed finding of an open incident."""
        with self._lock:
            return self._latest.get(incident_id)

    # ------------------------------------------------------------ changes
    def set_evidence(self, incident_id: str, path: str) -> Incident:
        """Record the evidence bundle path; returns the updated incident (``KeyError`` if unknown)."""
        return self._change(incident_id, lambda inc: replace(inc, evidence_dir=str(path)))

    def set_diagnosis(
        self,
        incident_id: str,
        diagnosis: Sequence[Mapping[str, Any]],
        crash: Mapping[str, Any] | None,
        notes: Sequence[str] = (),
    ) -> Incident:
        """Record what the incident most likely is (and, engine_dead, the crash); ``notes`` (such as
        "device idle while the engine spins") join the summary. ``KeyError`` if unknown."""

        def change(inc: Incident) -> Incident:
            extra = [n for n in notes if n not in inc.summary]
            return replace(
                inc,
                diagnosis=tuple(dict(d) for d in diagnosis),
                crash=dict(crash) if crash is not None else inc.crash,
                summary="; ".join([inc.summary, *extra]) if extra else inc.summary,
            )

        return self._change(incident_id, change)

    def add_action(self, incident_id: str, action: Action) -> Incident:
        """Append an action taken for the incident; returns it updated (``KeyError`` if unknown)."""
        return self._change(incident_id, lambda inc: inc.with_action(action))

    def _change(self, incident_id: str, fn: Callable[[Incident], Incident]) -> Incident:
        with self._lock:
            for key, inc in self._open.items():
                if inc.id == incident_id:
                    new = self._open[key] = fn(inc)
                    self._persist(new)
                    return new
            for i, inc in enumerate(self._resolved):
                if inc.id == incident_id:
                    new = self._resolved[i] = fn(inc)
                    self._persist(new)
                    return new
        raise KeyError(incident_id)

    def _find(self, incident_id: str) -> Incident | None:
        for inc in self._open.values():
            if inc.id == incident_id:
                return inc
        for inc in self._resolved:
            if inc.id == incident_id:
                return inc
        return None

    def _persist(self, inc: Incident) -> None:
        if self._store is None:
            return
        try:
            self._store.save(inc)
        except (OSError, ValueError, TypeError, RecursionError) as e:  # a disk or a finding's bad data: never raised
            log.error("could not persist incident %s: %s: %s", inc.id, type(e).__name__, e)

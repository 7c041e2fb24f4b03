"""Bounded in-memory ring buffers of samples, keyed by (target, subject, metric).

Pure data: no I/O, no clock of its own (callers pass monotonic times). Each key
keeps points no older than ``horizon`` seconds (or its metric's own entry in
``horizons``, e.g. memory kept since ready) and at most ``max_points``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Sample
from vllm_guardian.series import metrics

Point = tuple[float, float]  # (monotonic t, value)


@dataclass(frozen=True)
class SeriesKey:
    target: str
    subject: str
    metric: str


class SeriesStore:
    @staticmethod
    def memory_horizons(d: DetectorsConfig) -> dict[str, float]:
        """The leak detectors judge warm-up from the curve since ready: keep memory that long."""
        keep = max(c.warmup + c.window for c in (d.host_memory_leak, d.accel_memory_leak)) + 30.0
        return {metrics.PROC_RSS: keep, metrics.ACCEL_MEM: keep}

    def __init__(
        self, horizon: float = 600.0, max_points: int = 1200, horizons: dict[str, float] | None = None
    ) -> None:
        if horizon <= 0 or max_points <= 0:
            raise ValueError("horizon and max_points must be > 0")
        self.horizon = horizon
        self.max_points = max_points
        self.horizons = {m: max(h, horizon) for m, h in (horizons or {}).items()}
        self._data: dict[SeriesKey, deque[Point]] = {}
        self._subjects: dict[tuple[str, str], set[str]] = {}  # (target, metric) → subjects with points

    def add(self, sample: Sample) -> None:
        key = SeriesKey(sample.target, sample.subject, sample.metric)
        buf = self._data.get(key)
        if buf is None:
            buf = self._data[key] = deque(maxlen=self.max_points)
            self._subjects.setdefault((key.target, key.metric), set()).add(key.subject)
        if buf and sample.t < buf[-1][0]:
            return  # out-of-order sample (a late async result): windows stay sorted
        buf.append((sample.t, float(sample.value)))
        cutoff = sample.t - self.horizons.get(key.metric, self.horizon)
        while buf and buf[0][0] < cutoff:
            buf.popleft()

    def extend(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            self.add(s)

    def window(self, target: str, subject: str, metric: str, since: float) -> list[Point]:
        """Points with ``t >= since``, oldest first (read from the newest end: windows are short
        next to the horizon)."""
        buf = self._data.get(SeriesKey(target, subject, metric))
        if not buf:
            return []
        if buf[0][0] >= since:
            return list(buf)
        out = []
        for p in reversed(buf):
            if p[0] < since:
                break
            out.append(p)
        out.reverse()
        return out

    def latest(self, target: str, subject: str, metric: str) -> Point | None:
        buf = self._data.get(SeriesKey(target, subject, metric))
        return buf[-1] if buf else None

    def subjects(self, target: str, metric: str, prefix: str = "") -> list[str]:
        """Subjects of ``target`` that have ``metric`` (optionally under a subject prefix)."""
        return sorted(s for s in self._subjects.get((target, metric), ()) if s.startswith(prefix))

    def keys(self) -> Iterator[SeriesKey]:
        return iter(list(self._data))

    def drop_target(self, target: str) -> None:
        for k in [k for k in self._data if k.target == target]:
            self._forget(k)

    def drop_subjects(self, target: str, keep: set[str]) -> None:
        """Forget per-process/thread series of ``target`` whose subject's pid is not kept.

        ``keep`` holds process subjects (``p<pid>``); thread subjects follow their process.
        Target-level series (subject ``""``) are always kept.
        """
        for k in [k for k in self._data if k.target == target and k.subject]:
            if k.subject.split("/", 1)[0] not in keep:
                self._forget(k)

    def expire(self, now: float) -> None:
        """Drop points past the horizon everywhere, and empty series."""
        for k in list(self._data):
            cutoff = now - self.horizons.get(k.metric, self.horizon)
            buf = self._data[k]
            while buf and buf[0][0] < cutoff:
                buf.popleft()
            if not buf:
                self._forget(k)

    def _forget(self, k: SeriesKey) -> None:
        del self._data[k]
        subjects = self._subjects.get((k.target, k.metric))
        if subjects is not None:
            subjects.discard(k.subject)
            if not subjects:
                del self._subjects[(k.target, k.metric)]

    def __len__(self) -> int:
        return sum(len(b) for b in self._data.values())

"""Bounded in-memory ring buffers of samples, keyed by (target, subject, metric).

Pure data: no I/O, no clock of its own (callers pass monotonic times). Each key
keeps points no older than ``horizon`` seconds and at most ``max_points``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..config_schema import Config
from ..model import Sample

Point = tuple[float, float]  # (monotonic t, value)


@dataclass(frozen=True)
class SeriesKey:
    target: str
    subject: str
    metric: str


class SeriesStore:
    @classmethod
    def for_config(cls, cfg: Config) -> SeriesStore:
        """Long enough for twice the longest detector window (and canary interval), plus 30 s."""
        d = cfg.detectors
        longest = max(d.busy_loop.window, d.engine_stall.window, d.kv_cache_leak.window,
                      d.accel_memory_leak.window, d.host_memory_leak.window, cfg.probes.canary.interval)
        return cls(horizon=2 * longest + 30)

    def __init__(self, horizon: float = 600.0, max_points: int = 1200) -> None:
        if horizon <= 0 or max_points <= 0:
            raise ValueError("horizon and max_points must be > 0")
        self.horizon = horizon
        self.max_points = max_points
        self._data: dict[SeriesKey, deque[Point]] = {}

    def add(self, sample: Sample) -> None:
        key = SeriesKey(sample.target, sample.subject, sample.metric)
        buf = self._data.get(key)
        if buf is None:
            buf = self._data[key] = deque(maxlen=self.max_points)
        if buf and sample.t < buf[-1][0]:
            return  # out-of-order sample (a late async result): windows stay sorted
        buf.append((sample.t, float(sample.value)))
        cutoff = sample.t - self.horizon
        while buf and buf[0][0] < cutoff:
            buf.popleft()

    def extend(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            self.add(s)

    def window(self, target: str, subject: str, metric: str, since: float) -> list[Point]:
        """Points with ``t >= since``, oldest first."""
        buf = self._data.get(SeriesKey(target, subject, metric))
        if not buf:
            return []
        return [p for p in buf if p[0] >= since]

    def latest(self, target: str, subject: str, metric: str) -> Point | None:
        buf = self._data.get(SeriesKey(target, subject, metric))
        return buf[-1] if buf else None

    def subjects(self, target: str, metric: str, prefix: str = "") -> list[str]:
        """Subjects of ``target`` that have ``metric`` (optionally under a subject prefix)."""
        return sorted(
            k.subject
            for k in self._data
            if k.target == target and k.metric == metric and k.subject.startswith(prefix)
        )

    def keys(self) -> Iterator[SeriesKey]:
        return iter(list(self._data))

    def drop_target(self, target: str) -> None:
        for k in [k for k in self._data if k.target == target]:
            del self._data[k]

    def drop_subjects(self, target: str, keep: set[str]) -> None:
        """Forget per-process/thread series of ``target`` whose subject's pid is not kept.

        ``keep`` holds process subjects (``p<pid>``); thread subjects follow their process.
        Target-level series (subject ``""``) are always kept.
        """
        for k in [k for k in self._data if k.target == target and k.subject]:
            if k.subject.split("/", 1)[0] not in keep:
                del self._data[k]

    def expire(self, now: float) -> None:
        """Drop points past the horizon everywhere, and empty series."""
        cutoff = now - self.horizon
        for k in list(self._data):
            buf = self._data[k]
            while buf and buf[0][0] < cutoff:
                buf.popleft()
            if not buf:
                del self._data[k]

    def __len__(self) -> int:
        return sum(len(b) for b in self._data.values())

"""Bounded in-memory ring buffers of samples, keyed by (target, subject, metric).

Pure data: no I/O, no clock of its own (callers pass monotonic times). Each key
keeps points no older than ``horizon`` seconds (or its metric's own entry in
``horizons``, e.g. memory kept since ready) and at most ``max_points``.

A target has at most ``max_series`` keys of processes, threads and engines (its whole-target
series, subject ``""``, a fixed set of names, are always kept): a sample that would open one more
is dropped and counted (``refused``), so no input can grow the store without bound. The probes
bound what they write (the HTTP probe keeps engine ranks below ``max_engines``); this is the
backstop, sized far above a real tree (~100 threads per process, 6 series each, read only while
hot).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Sample
from vllm_guardian.series import metrics

Point = tuple[float, float]  # (monotonic t, value)
MAX_SERIES_PER_TARGET = 10_000  # keys with a subject per target (processes, threads, engines)


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
        self,
        horizon: float = 600.0,
        max_points: int = 1200,
        horizons: dict[str, float] | None = None,
        max_series: int = MAX_SERIES_PER_TARGET,
    ) -> None:
        if horizon <= 0 or max_points <= 0 or max_series <= 0:
            raise ValueError("horizon, max_points and max_series must be > 0")
        self.horizon = horizon
        self.max_points = max_points
        self.max_series = max_series
        self.horizons = {m: max(h, horizon) for m, h in (horizons or {}).items()}
        self._data: dict[SeriesKey, deque[Point]] = {}
        self._subjects: dict[tuple[str, str], set[str]] = {}  # (target, metric) → subjects with points
        self._counts: dict[str, int] = {}  # target → its keys with a subject (process, thread, engine)
        self._refused: dict[str, int] = {}  # target → samples dropped: they would have opened a key past max_series

    def add(self, sample: Sample) -> bool:
        """Keep ``sample``; False when it was dropped because its target has ``max_series`` keys."""
        key = SeriesKey(sample.target, sample.subject, sample.metric)
        buf = self._data.get(key)
        if buf is None:
            if key.subject:
                if self._counts.get(key.target, 0) >= self.max_series:
                    self._refused[key.target] = self._refused.get(key.target, 0) + 1
                    return False
                self._counts[key.target] = self._counts.get(key.target, 0) + 1
            buf = self._data[key] = deque(maxlen=self.max_points)
            self._subjects.setdefault((key.target, key.metric), set()).add(key.subject)
        if buf and sample.t < buf[-1][0]:
            return True  # out-of-order sample (a late async result): windows stay sorted
        buf.append((sample.t, float(sample.value)))
        cutoff = sample.t - self.horizons.get(key.metric, self.horizon)
        while buf and buf[0][0] < cutoff:
            buf.popleft()
        return True

    def extend(self, samples: Iterable[Sample]) -> list[str]:
        """Keep every sample; the targets whose first sample ever dropped (``add``) was among them
        (to say so once)."""
        first: list[str] = []
        for s in samples:
            if not self.add(s) and self._refused[s.target] == 1:
                first.append(s.target)
        return first

    def refused(self, target: str) -> int:
        """Samples of ``target`` dropped since it was first seen: they would have opened a key past
        ``max_series``."""
        return self._refused.get(target, 0)

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
        self._refused.pop(target, None)

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
        if k.subject:
            left = self._counts[k.target] - 1
            if left:
                self._counts[k.target] = left
            else:
                del self._counts[k.target]
        subjects = self._subjects.get((k.target, k.metric))
        if subjects is not None:
            subjects.discard(k.subject)
            if not subjects:
                del self._subjects[(k.target, k.metric)]

    def __len__(self) -> int:
        return sum(len(b) for b in self._data.values())

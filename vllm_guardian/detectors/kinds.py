"""What each incident kind means, one row per kind: the single place every consumer asks.

A row says how the kind is found (``evaluate``: a detector over one target's view; None when the
loop raises it itself: ``probe_failure`` from the probes' failure episodes,
``restart_budget_exhausted`` from the remediation budget, ``accel_fault`` per device), where its
config lives (``section`` under ``detectors:``, read for ``mode`` and the rest), how much history it
needs kept (``history``: seconds of series, for the store's horizon), whether it is a hang (a short
kill grace, nothing to drain), whether its evidence must be read gently (py-spy ``--nonblocking``:
the process keeps running), whether a restart can ever help it, which charts of the incident page
are the ones that fired, and whether its bundle gets crash forensics.

Adding a kind: its detector file (which declares its kind: ``KIND = Kind.declare("name")``) and one
row here; a config section under ``detectors:`` (for ``mode`` and thresholds) is optional: without
one the kind alerts, opens on the first finding and resolves on the first quiet tick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from vllm_guardian.config.schema import Config
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.detectors import (
    accel_memory_leak,
    busy_loop,
    checkpoint_failed,
    engine_dead,
    engine_stall,
    host_memory_leak,
    kv_cache_leak,
    output_corruption,
    pause_too_long,
    startup_timeout,
)
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Finding, Kind
from vllm_guardian.series import SeriesStore
from vllm_guardian.series import metrics as m

Detector = Callable[[TargetView, DetectorsConfig], "Finding | None"]
History = Callable[[DetectorsConfig], float]


def _none(d: DetectorsConfig) -> float:
    return 0.0


@dataclass(frozen=True)
class KindSpec:
    kind: Kind
    evaluate: Detector | None  # None: raised by the loop itself, not per target per tick
    section: str | None  # its config under ``detectors:`` (None: no section)
    history: History = _none  # seconds of series the detector looks back over
    hang: bool = False  # the engine is stuck: short SIGTERM -> SIGKILL grace, nothing to drain
    gentle_evidence: bool = False  # stacks read with --nonblocking: never pause the process
    restarts: bool = True  # may a restart ever be the answer (mode remediate)?
    charts: tuple[str, ...] = ()  # the incident page's charts of the windows that fired
    forensics: bool = False  # the bundle gets crash forensics (log tail -> traceback -> catalog)
    answers_evidence: bool = False  # explained by the answers (gates.json), not by stacks

    def mode(self, cfg: DetectorsConfig) -> Mode:
        """The configured mode; alert for a kind without a section of its own."""
        section = getattr(cfg, self.section, None) if self.section else None
        mode = getattr(section, "mode", None)
        return mode if isinstance(mode, Mode) else Mode.ALERT


_ROWS = (
    KindSpec(
        Kind.BUSY_LOOP,
        busy_loop.evaluate,
        "busy_loop",
        history=lambda d: d.busy_loop.window,
        hang=True,
        charts=("thread_cpu", "thread_vol", "progress", "accel_util"),
    ),
    KindSpec(
        Kind.ENGINE_STALL,
        engine_stall.evaluate,
        "engine_stall",
        history=lambda d: d.engine_stall.window,
        hang=True,
        charts=("progress", "requests", "health", "thread_cpu"),
    ),
    KindSpec(
        Kind.ENGINE_DEAD,
        engine_dead.evaluate,
        "engine_dead",
        hang=True,
        charts=("health", "progress", "requests"),
        forensics=True,
    ),
    KindSpec(
        Kind.KV_CACHE_LEAK,
        kv_cache_leak.evaluate,
        "kv_cache_leak",
        history=lambda d: d.kv_cache_leak.window,
        gentle_evidence=True,
        charts=("kv", "requests", "progress"),
    ),
    KindSpec(
        Kind.ACCEL_MEMORY_LEAK,
        accel_memory_leak.evaluate,
        "accel_memory_leak",
        history=lambda d: d.accel_memory_leak.window,
        gentle_evidence=True,
        charts=("accel_mem", "accel_util"),
    ),
    KindSpec(
        Kind.HOST_MEMORY_LEAK,
        host_memory_leak.evaluate,
        "host_memory_leak",
        history=lambda d: d.host_memory_leak.window,
        gentle_evidence=True,
        charts=("rss",),
    ),
    KindSpec(
        Kind.OUTPUT_CORRUPTION,
        output_corruption.evaluate,
        "output_corruption",
        charts=("health", "progress"),
        answers_evidence=True,
    ),
    KindSpec(Kind.STARTUP_TIMEOUT, startup_timeout.evaluate, "startup_timeout", gentle_evidence=True),
    KindSpec(Kind.PAUSE_TOO_LONG, pause_too_long.evaluate, "pause_too_long", gentle_evidence=True, restarts=False),
    KindSpec(checkpoint_failed.KIND, checkpoint_failed.evaluate, None, gentle_evidence=True, restarts=False),
    KindSpec(Kind.PROBE_FAILURE, None, "probe_failure", gentle_evidence=True, restarts=False),
    KindSpec(Kind.RESTART_BUDGET_EXHAUSTED, None, None, restarts=False),
    KindSpec(Kind.ACCEL_FAULT, None, "accel_fault", restarts=False),
)

KINDS: Mapping[Kind, KindSpec] = MappingProxyType({row.kind: row for row in _ROWS})

# the per-target detectors, in table order
DETECTORS: Mapping[Kind, Detector] = MappingProxyType(
    {row.kind: row.evaluate for row in _ROWS if row.evaluate is not None}
)
HANG_KINDS = frozenset(row.kind for row in _ROWS if row.hang)
GENTLE_EVIDENCE = frozenset(row.kind for row in _ROWS if row.gentle_evidence)
NEVER_RESTART = frozenset(row.kind for row in _ROWS if not row.restarts)
ANSWER_KINDS = frozenset(row.kind for row in _ROWS if row.answers_evidence)


def spec(kind: Kind | str) -> KindSpec | None:
    """The row of ``kind`` (a ``Kind`` or its value); None for a name that is no kind."""
    try:
        return KINDS.get(Kind(kind))
    except ValueError:
        return None


def longest_history(cfg: DetectorsConfig) -> float:
    """The longest look-back of any kind."""
    return max(row.history(cfg) for row in _ROWS)


def series_store_for(cfg: Config) -> SeriesStore:
    """A store that keeps twice the longest look-back of any kind (and of the canary's interval and
    a pause's spin limit), plus 30 s; memory series since ready (``SeriesStore.memory_horizons``);
    the request gauges over a pause's pending limit (``detectors/hold.py``)."""
    life = cfg.lifecycle
    longest = max(longest_history(cfg.detectors), cfg.probes.canary.interval, life.max_pause_spin)
    pending = {name: life.max_pause_pending + 30 for name in (m.REQ_RUNNING, m.REQ_WAITING)}
    horizons = {**SeriesStore.memory_horizons(cfg.detectors), **pending}
    return SeriesStore(horizon=2 * longest + 30, horizons=horizons)

"""Pure helpers of the machine's steps: how long a drain may take, whether the queue is empty, how
long SIGTERM gets before SIGKILL. Read only the series and the config they are handed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.detectors.kinds import HANG_KINDS as HANGS
from vllm_guardian.model import Kind
from vllm_guardian.series import metrics as m

if TYPE_CHECKING:
    from vllm_guardian.series import SeriesStore

HANG_KINDS = frozenset(k.value for k in HANGS)  # the kind table's hangs (``detectors/kinds.py``), by name
HANG_DRAIN_TIMEOUT = 5.0  # a hung engine has nothing to drain: the most a hang waits, if it still steps
FRESH = 3.0  # queue gauges older than this say nothing about now


def stop_grace(rc: RestartConfig, reason: str) -> float:
    """SIGTERM → SIGKILL: short for a hung tree (it will not shut down cleanly), else ``stop_timeout``."""
    return min(rc.hang_stop_grace, rc.stop_timeout) if reason in HANG_KINDS else rc.stop_timeout


def stepping(series: SeriesStore, target: str, now: float) -> bool:
    """Did the engine's step or token counters move in the last ``HANG_DRAIN_TIMEOUT`` seconds?"""
    for metric in (m.ITERATIONS, m.GEN_TOKENS):
        pts = series.window(target, "", metric, now - HANG_DRAIN_TIMEOUT)
        if len(pts) >= 2 and pts[-1][1] > pts[0][1]:
            return True
    return False


def drain_timeout(configured: float, reason: str, series: SeriesStore, target: str, now: float) -> float:
    """A dead engine serves nothing (0); a hung one waits at most ``HANG_DRAIN_TIMEOUT``, and only
    while it still steps; anything else waits the configured ``drain.timeout``."""
    if reason == Kind.ENGINE_DEAD.value:
        return 0.0  # counters that moved before it died drain nothing
    if reason in HANG_KINDS:
        return min(configured, HANG_DRAIN_TIMEOUT if stepping(series, target, now) else 0.0)
    return configured


def queue_empty(series: SeriesStore, target: str, now: float, since: float) -> bool:
    """Running + waiting requests are 0 in fresh gauges read after ``since`` (the drain began)."""
    running = series.latest(target, "", m.REQ_RUNNING)
    waiting = series.latest(target, "", m.REQ_WAITING)
    if running is None or waiting is None or now - running[0] > FRESH or now - waiting[0] > FRESH:
        return False
    return running[1] + waiting[1] == 0 and running[0] > since

"""Discovery as the loop's first stage: a discovery pass applied to the tracker, changes logged.

Runs every ``discovery.interval`` on the loop thread (the cache keeps settled process titles
and port owners between passes). A restarted target's per-process series are dropped (the
pids are new); a target gone for ``forget_after`` is returned as forgotten, for the loop to
drop everything it keeps about it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from .config_schema import Config
from .discovery import DiscoveryCache, discover
from .host.procfs import ProcFS
from .model import Subject, Target
from .series import SeriesStore
from .tracker import Changes, Tracker

if TYPE_CHECKING:
    from .platform_match import PlatformMatcher

NAME = "discovery"  # counted like a probe: runs, failures, duration


class TargetsStage:
    def __init__(
        self,
        cfg: Config,
        proc: ProcFS,
        tracker: Tracker,
        series: SeriesStore,
        log: logging.Logger,
        platform: PlatformMatcher | None = None,
    ) -> None:
        self.cfg = cfg
        self.platform = platform  # match.kubernetes / match.systemd_unit
        self.on_discovery: list[Callable[[tuple[Target, ...]], None]] = []  # each pass's targets (API keys)
        self.proc = proc
        self.tracker = tracker
        self.series = series
        self.log = log
        self.cache = DiscoveryCache()
        self.unmatched: tuple[tuple[str, str], ...] = ()  # configured targets not found, and why
        self._next = float("-inf")

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.cfg.discovery.interval
        return True

    def refresh(self, now: float) -> Changes:
        """One discovery pass; raises what a broken /proc raises (the loop counts it)."""
        self.cache.now = now
        result = discover(self.proc, self.cfg, cache=self.cache, platform=self.platform)
        self.unmatched = result.unmatched
        for hook in self.on_discovery:
            hook(result.targets)
        changes = self.tracker.apply_discovery(result.targets, result.orphans, now)
        for name in changes.new:
            self.log.info("target %s discovered: %s", name, self.tracker.targets[name].target.key)
        for name in changes.restarted:
            tr = self.tracker.targets[name]
            self.log.info("target %s has a new API server %s", name, tr.target.key)
            self.series.drop_subjects(name, {Subject(p.pid).key for p in tr.target.processes})
        for name in changes.vanished:
            self.log.warning("target %s: API server is gone", name)
        for name in changes.forgotten:
            self.log.info("target %s forgotten after %.0fs gone", name, self.cfg.discovery.forget_after)
            self.series.drop_target(name)
        return changes

"""Discovery as the loop's first stage: passes run off the loop, their results applied on it.

Every ``discovery.interval`` a pass (``discover()`` and the ``on_discovery`` hooks, e.g. the API
keys read from ``environ``) starts on its own thread (``vllm_guardian.discovery.worker``); the loop waits
at most ``discovery.pass_wait`` for it, so a normal pass is applied in the tick that started it and
a slow one at the start of the first tick after it ends. Applying (the tracker, the log lines,
dropped series) happens on the loop thread only. A pass still running after
``discovery.stuck_after`` is abandoned: reported with the file it is blocked on, the process it
blocked on never read again by later passes, and a fresh pass with a fresh copy of the cache
started; meanwhile the targets of the last good pass keep being probed. A restarted target's
per-process series are dropped (the pids are new); a target gone for ``forget_after`` is
returned as forgotten, for the loop to drop everything it keeps about it. A target matched by
its argv's port (fds unreadable) is said once per incarnation; the first refused fd table notes
the missing capability (``host.capabilities``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from collections.abc import Iterable
from typing import TYPE_CHECKING, Callable

from vllm_guardian.config.schema import Config
from vllm_guardian.discovery.argv import ARGV, ASSUMED, NOT_VERIFIED
from vllm_guardian.discovery.scan import DiscoveryResult, discover, pid_file_reader
from vllm_guardian.discovery.serving import AMBIGUOUS
from vllm_guardian.discovery.snapshot import DiscoveryCache
from vllm_guardian.discovery.worker import Abandoned, DiscoveryWorker
from vllm_guardian.host.capabilities import Capabilities, Capability, missing
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.server_files import ServerFiles
from vllm_guardian.model import ProcKey, Subject, Target
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.tracker import Changes, Tracker

if TYPE_CHECKING:
    from vllm_guardian.discovery.platform_match import PlatformMatcher

NAME = "discovery"  # counted like a probe: runs, failures, duration
MAX_ABANDONED = 4  # passes left blocked in a read before discovery stops starting new ones


@dataclass(frozen=True)
class PassOutcome:
    """What one pass came to, for the loop to count: applied (``changes``) or not (``error``)."""

    seconds: float | None  # how long it ran; None when no pass ran
    changes: Changes | None = None
    error: str = ""


DiscoveryHook = Callable[[tuple[Target, ...], frozenset[ProcKey]], None]  # a pass's targets, keys never to read


class TargetsStage:
    def __init__(
        self,
        cfg: Config,
        proc: ProcFS,
        tracker: Tracker,
        series: SeriesStore,
        log: logging.Logger,
        platform: PlatformMatcher | None = None,
        on_discovery: Iterable[DiscoveryHook] = (),
        rewrite: Callable[[Target], Target] | None = None,
        capabilities: Capabilities | None = None,
        files: ServerFiles | None = None,
    ) -> None:
        self.cfg = cfg
        self.read_pid_file = pid_file_reader(files or ServerFiles(log))  # match.pid_file, counted
        self.capabilities = capabilities or Capabilities(log)  # an fd table refused: noted (and said) once
        self.platform = platform  # match.kubernetes / match.systemd_unit
        # each pass's targets and the processes never to be read again (API keys); handed in, fixed
        self.on_discovery: tuple[DiscoveryHook, ...] = tuple(on_discovery)
        self.rewrite = rewrite  # e.g. a headless rank reached at its group's leader (groups/stage.py)
        self.proc = proc
        self.tracker = tracker
        self.series = series
        self.log = log
        self.cache = DiscoveryCache()
        self.skip: frozenset[ProcKey] = frozenset()  # processes a pass blocked on: never read again
        # processes whose environ read (the API-key lookup) blocked a pass: their cmdline is still read
        self.skip_environ: frozenset[ProcKey] = frozenset()
        self.unmatched: tuple[tuple[str, str], ...] = ()  # configured targets not found, and why
        # autodiscovery candidates not followed (argv says vLLM, the socket says otherwise), and why
        self.ignored: tuple[tuple[ProcKey, str], ...] = ()
        self.worker: DiscoveryWorker[tuple[DiscoveryResult, DiscoveryCache]] = DiscoveryWorker(
            cfg.discovery.stuck_after, MAX_ABANDONED, NAME
        )
        self._pass_cache: DiscoveryCache | None = None  # the copy the pass in flight fills
        self._next = float("-inf")
        self._stopped_said = False
        self._unverified_said: set[tuple[str, ProcKey]] = set()
        self._argv_said: set[tuple[str, ProcKey]] = set()
        self._assumed_said: set[tuple[str, ProcKey]] = set()

    def reconfigure(self, cfg: Config, platform: PlatformMatcher | None) -> None:
        """A config reload: the next discovery pass matches with the new config and platform."""
        self.cfg = cfg
        self.platform = platform

    def step(self, now: float) -> list[PassOutcome]:
        """Every tick: a finished pass applied, a stuck one abandoned; a new one started when due."""
        outcomes = []
        polled = self.worker.poll(now)
        if isinstance(polled, Abandoned):
            outcomes.append(self._abandon(polled))
            self._next = float("-inf")  # a fresh pass now
        elif polled is not None:
            outcomes.append(self._settle(polled.result, polled.error, polled.seconds, now))
        if self.worker.in_flight or now < self._next:
            return outcomes
        cache = self.cache.for_pass(now, self.skip)
        no_environ = self.skip | self.skip_environ
        if not self.worker.start(lambda current: self._pass(cache, current, no_environ), now):
            if self.worker.exhausted:
                outcomes.append(self._stopped())
            self._next = now + self.cfg.discovery.interval
            return outcomes
        self._pass_cache, self._stopped_said = cache, False
        self._next = now + self.cfg.discovery.interval
        if self.worker.wait(self.cfg.discovery.pass_wait):
            done = self.worker.poll(now)
            if done is not None and not isinstance(done, Abandoned):
                outcomes.append(self._settle(done.result, done.error, done.seconds, now))
        return outcomes

    def _pass(
        self, cache: DiscoveryCache, current: Callable[[], bool], no_environ: frozenset[ProcKey]
    ) -> tuple[DiscoveryResult, DiscoveryCache]:
        """On the worker thread: one pass, its reads recorded; hooks skipped once abandoned."""
        with self.proc.watched():
            result = discover(self.proc, self.cfg, read_file=self.read_pid_file, cache=cache, platform=self.platform)
            for hook in self.on_discovery:
                if current():
                    hook(result.targets, no_environ)
        # what the loop acts on is read afresh by every pass; the rest of the node once per STAT_REFRESH_S
        cache.watched = frozenset(p.pid for t in result.targets for p in t.processes) | {o.pid for o in result.orphans}
        return result, cache

    def _settle(
        self,
        done: tuple[DiscoveryResult, DiscoveryCache] | None,
        error: BaseException | None,
        seconds: float,
        now: float,
    ) -> PassOutcome:
        if error is not None or done is None:
            return PassOutcome(seconds, error=f"{type(error).__name__}: {error}")
        result, cache = done
        self.cache = cache
        self.skip = frozenset(k for k in self.skip if cache.keys.get(k.pid) == k)  # the gone are forgotten
        self.skip_environ = frozenset(k for k in self.skip_environ if cache.keys.get(k.pid) == k)
        return PassOutcome(seconds, self._apply(result, now))

    def _abandon(self, stuck: Abandoned) -> PassOutcome:
        """The pass in flight is stuck: say on what, never read that process's cmdline again."""
        relpath = self.proc.reading(stuck.thread_id) if stuck.thread_id is not None else ""
        cache = self._pass_cache
        first, _, name = relpath.partition(os.sep)
        key = cache.keys.get(int(first)) if cache is not None and first.isdigit() else None
        if key is not None and name == "environ":
            self.skip_environ |= {key}  # only its key lookup is given up: its title reads fine
        elif key is not None:
            self.skip |= {key}
        where = (
            f"blocked reading {os.path.join(self.proc.root, relpath)}"
            if relpath
            else "blocked outside /proc (the Kubernetes API, systemctl or a hook)"
        )
        skipped = (
            ""
            if key is None
            else f"; process {key.pid} (start {key.starttime}): its {name or 'files'} "
            f"{'are' if not name else 'is'} not read by later passes"
        )
        return PassOutcome(
            stuck.running_s,
            error=f"pass {where} for {stuck.running_s:.0f}s: abandoned{skipped}; the last targets are kept",
        )

    def _stopped(self) -> PassOutcome:
        why = (
            f"stopped: {self.worker.still_blocked()} abandoned passes are still blocked in reads; "
            "the last targets found are kept and probed"
        )
        if not self._stopped_said:
            self._stopped_said = True
            self.log.error("discovery %s", why)
        return PassOutcome(None, error=why)

    def _apply(self, result: DiscoveryResult, now: float) -> Changes:
        for name, why in result.unmatched:
            if (name, why) not in self.unmatched:  # once, while the reason holds
                level = logging.WARNING if why.startswith(AMBIGUOUS) else logging.INFO
                self.log.log(level, "configured target %s not found: %s", name, why, extra={"target": name})
        self.unmatched = result.unmatched
        said = {k for k, _ in self.ignored}
        for key, why in result.ignored:
            if key not in said:  # once per process, while it keeps being ignored
                self.log.warning("discovery: process %s looks like a vLLM server but is not followed: %s", key, why)
        self.ignored = result.ignored
        unverified = [t for t in result.targets if t.socket == "unverified"]
        for t in unverified:
            if (t.name, t.key) not in self._unverified_said:
                self.log.warning(
                    "target %s: cannot verify that %s owns the listening socket of %s (no permission to read "
                    "other users' processes' fds): followed by its command line alone",
                    t.name,
                    t.key,
                    t.api_url,
                )
        self._unverified_said = {(t.name, t.key) for t in unverified}
        assumed = [t for t in result.targets if t.socket == ASSUMED]
        for t in assumed:
            if (t.name, t.key) not in self._assumed_said:
                self.log.warning(
                    "target %s: %s is served only by an IPv6 [::] socket of %s whose IPV6_V6ONLY flag the kernel "
                    "did not say (sock_diag unavailable: allow AF_NETLINK); taken to serve it, no automatic restart",
                    t.name,
                    t.api_url,
                    t.key,
                    extra={"target": t.name},
                )
        self._assumed_said = {(t.name, t.key) for t in assumed}
        if result.fds_denied:
            pid = result.fds_denied[0]
            why = f"reading /proc/{pid}/fd answered EACCES (another user's process, or one it may not ptrace)"
            self.capabilities.note(missing(Capability.READ_SOCKETS, why))
        by_argv = [t for t in result.targets if t.socket == ARGV]
        for t in by_argv:
            if (t.name, t.key) not in self._argv_said:
                self.log.warning(
                    "target %s: matched by the port its command line names (%s): the guardian cannot read the "
                    "sockets of %s; %s; detection and alerts go on, no automatic restart",
                    t.name,
                    t.port,
                    t.key,
                    NOT_VERIFIED,
                    extra={"target": t.name},
                )
        self._argv_said = {(t.name, t.key) for t in by_argv}
        found = tuple(map(self.rewrite, result.targets)) if self.rewrite is not None else result.targets
        changes = self.tracker.apply_discovery(found, result.orphans, now)
        for name in changes.new:
            self.log.info(
                "target %s discovered: %s", name, self.tracker.targets[name].target.key, extra={"target": name}
            )
        for name in changes.restarted:
            tr = self.tracker.targets[name]
            self.log.info("target %s has a new API server %s", name, tr.target.key, extra={"target": name})
            self.series.drop_subjects(name, {Subject(p.pid).key for p in tr.target.processes})
        for name in changes.vanished:
            self.log.warning("target %s: API server is gone", name, extra={"target": name})
        for name in changes.forgotten:
            self.log.info("target %s forgotten after %.0fs gone", name, self.cfg.discovery.forget_after)
            self.series.drop_target(name)
        return changes

    def close(self) -> None:
        """No new pass; one in flight is never waited for (shutdown must not hang on a read)."""
        self.worker.close()

"""The run loop: one tick every ``interval`` through the injected clock, each guarded.

A tick that raises is logged once per episode, counted (``ticks_failed``) and shown in the
status errors; the loop goes on. Only a tick that worked feeds the heartbeat (``on_tick``:
/healthz, the systemd watchdog, re-notification), and what runs there is guarded the same way:
a full disk (ENOSPC) or a bug in it never ends the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from vllm_guardian import __version__
from vllm_guardian.clock import Clock
from vllm_guardian.config.schema import Config
from vllm_guardian.discovery.targets import TargetsStage
from vllm_guardian.probes.scheduler import ProbeScheduler
from vllm_guardian.state.async_runner import AsyncRunner
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.state.selfstats import SelfStats


class Daemon(Protocol):
    """What the run loop needs of the daemon (``loop/daemon.py``'s ``Daemon`` is one)."""

    cfg: Config
    log: logging.Logger
    node: str
    clock: Clock
    runner: AsyncRunner
    probes: ProbeScheduler
    targets: TargetsStage
    stats: SelfStats
    episodes: EpisodeLog

    def tick(self) -> object: ...


def run_loop(daemon: Daemon, stop: threading.Event, on_tick: Callable[[], None] | None = None) -> None:
    interval = daemon.cfg.interval
    daemon.log.info(
        "guardian %s on %s: interval %.2fs, state in %s", __version__, daemon.node, interval, daemon.cfg.state_dir
    )
    clock = daemon.clock
    try:
        while not stop.is_set():
            t0 = clock.monotonic()
            if _guarded_tick(daemon, t0) and on_tick:
                _guarded_after_tick(daemon, on_tick, t0)
            clock.sleep(max(0.0, interval - (clock.monotonic() - t0)))
    finally:
        daemon.runner.shutdown()
        daemon.probes.close()
        daemon.targets.close()  # a discovery pass stuck in a read is not waited for


def _guarded_tick(daemon: Daemon, now: float) -> bool:
    """One tick; False when it raised."""
    try:
        daemon.tick()
    except Exception as e:  # the loop survives its own bugs: logged once, counted
        daemon.stats.ticks_failed += 1
        if "tick" not in daemon.episodes.current():
            daemon.log.exception("tick failed")
        daemon.episodes.fail("tick", f"{type(e).__name__}: {e}", now)
        return False
    daemon.episodes.ok("tick")
    return True


def _guarded_after_tick(daemon: Daemon, on_tick: Callable[[], None], now: float) -> None:
    try:
        on_tick()
    except Exception as e:  # after-tick work must never end the loop: logged once, counted
        daemon.stats.after_tick_failed += 1
        if "after_tick" not in daemon.episodes.current():
            daemon.log.exception("after-tick work failed")
        daemon.episodes.fail("after_tick", f"{type(e).__name__}: {e}", now)
        return
    daemon.episodes.ok("after_tick")

"""Faults 3 and 5: the loop outlives what runs after a tick, and only a tick that worked feeds
``/healthz`` and the systemd watchdog.

3  an after-tick hook that raises (re-notifying on a full disk: ENOSPC from the spool) neither
   ends the loop nor loses the events of incidents that open or resolve meanwhile: a spool that
   refuses writes holds them in memory and they still reach Redis, in order;
5  a tick that raises does not feed the heartbeat; failing ticks are counted in the status
   errors.
"""

from __future__ import annotations

import errno
import logging
import threading

from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.daemon import Daemon
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.sinks.redis_sink import AlertSink, AlertSinkSettings
from vllm_guardian.sinks.redis_client import make_client
from vllm_guardian.sinks.spool import Spool
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_http import FakeHttp
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_runner import FakeRunner
from vllm_guardian.testing.redis_server import RedisServer

from tests.support.wait import wait_for


def daemon(tmp_path) -> tuple[Daemon, FakeClock]:
    cfg = parse_config({"node": "n1", "state_dir": str(tmp_path / "state"), "api": {"http": None}})
    clock = FakeClock()
    d = build_daemon(
        cfg,
        Seams(clock, FakeProcTree(tmp_path / "proc").procfs(), FakeHttp({}), FakeRunner(), FakeControl(set())),
        log=logging.getLogger("t"),
    )
    return d, clock


def run_ticks(d: Daemon, clock: FakeClock, n: int, on_tick) -> None:
    """Run the real loop until the hook was called ``n`` times."""
    stop = threading.Event()
    calls = {"n": 0}

    def hook():
        calls["n"] += 1
        if calls["n"] >= n:
            stop.set()
        on_tick()

    d.run(stop, on_tick=hook)


def test_an_after_tick_hook_that_raises_enospc_does_not_end_the_loop(tmp_path):
    d, clock = daemon(tmp_path)
    beats = []

    def hook():
        beats.append(1)
        raise OSError(errno.ENOSPC, "No space left on device")

    run_ticks(d, clock, 5, hook)
    assert len(beats) == 5
    assert "after_tick" in d.status().to_dict()["errors"]


def test_a_failing_tick_does_not_feed_the_heartbeat_and_is_counted(tmp_path):
    d, clock = daemon(tmp_path)

    def broken():
        raise RuntimeError("a bug in the tick")

    d._tick = broken  # type: ignore[method-assign]  # the tick itself is what fails here
    beats = []
    stop = threading.Event()
    calls = {"n": 0}
    real_sleep = clock.sleep

    def sleep(seconds):
        calls["n"] += 1
        if calls["n"] >= 5:
            stop.set()
        real_sleep(seconds)

    clock.sleep = sleep  # type: ignore[method-assign]  # the clock's sleep stops the loop after 5 naps
    d.run(stop, on_tick=lambda: beats.append(1))
    assert beats == []
    assert d.stats.ticks_failed >= 5
    assert "tick" in d.episodes.current()


class FullDisk(Spool):
    """A spool on a disk that is full: every append fails with ENOSPC, like the kernel says."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.full = True

    def append(self, event):
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().append(event)


def test_alerts_published_while_the_spool_disk_is_full_still_reach_redis_in_order(tmp_path):
    with RedisServer() as redis:
        spool = FullDisk(tmp_path / "spool", max_events=100, max_bytes=1 << 20)
        sink = AlertSink(
            client=make_client(redis.url), spool=spool, settings=AlertSinkSettings(node="n1", backoff_max=0.2)
        )
        try:
            for i in range(5):
                sink.publish({"id": f"E{i:04d}", "kind": "test"})  # never raises: held in memory
            wait_for(lambda: sink.stats()["delivered_total"] == 5, what="delivery from memory")
            spool.full = False
            for i in range(5, 8):
                sink.publish({"id": f"E{i:04d}", "kind": "test"})
            wait_for(lambda: sink.stats()["delivered_total"] == 8, what="delivery after the disk freed")
            got = [f["id"] for _, f in redis.client().xrange("guardian:alerts")]
            assert got == [f"E{i:04d}" for i in range(8)]
        finally:
            sink.close()


def test_remediation_state_that_cannot_be_written_refuses_the_sequence_and_raises_nothing(tmp_path):
    from tests.support.remediation_world import World

    (tmp_path / "remediation").write_text("")  # the folder cannot be made: every save fails
    w = World(tmp_path)
    decision = w.consider(w.open())
    assert decision.startswith("escalated") and "could not be written" in decision
    w.step(1, n=10)
    assert w.control.signals == [] and w.rem.serving("llm")

"""Fault 20 (the rest): discovery is never the weak link of the loop.

A ``/proc/<pid>/cmdline`` read of a process wedged in a GPU driver with its memory map locked
does not return. The seam here does exactly that for one pid: its cmdline read waits on an event
nobody sets until the test ends. Discovery runs on its own thread, so the loop keeps ticking and
probing the targets it already has; a pass stuck for ``discovery.stuck_after`` (on the injected
clock) is reported once with the file it is blocked on, abandoned, and the process it blocked
on is never read again; its late result is discarded.

Before this change discovery ran inline in ``Daemon.tick``: every test here but the fast-path
one fails on that code, the first blocked tick never returning (caught by ``DEADLINE``). The
fast-path one pins what must not change: a normal pass is applied in the tick that started it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.series import metrics as m
from vllm_guardian.seams import Seams
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner
from tests.support.wait import poll

API, ENGINE = 100, 110
WEDGED = 666
DEADLINE = 30.0  # seconds a tick may take before the test calls it blocked; never near when all is well
SERVER = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")


class WedgedCmdline:
    """The fake /proc's reads, except that ``<pid>/cmdline`` of the wedged pids does not return
    until ``release`` (the read of a process whose mmap lock is held in the kernel)."""

    def __init__(self, tree: FakeProcTree) -> None:
        self.tree = tree
        self.wedged: dict[int, threading.Event] = {}
        self.wedged_environ: dict[int, threading.Event] = {}

    def wedge(self, pid: int) -> threading.Event:
        self.wedged[pid] = threading.Event()
        self.tree.add_process(pid, 1, ("python3", "wedged-in-the-driver.py"))
        return self.wedged[pid]

    def wedge_environ(self, pid: int) -> threading.Event:
        """The same for ``<pid>/environ`` of a process already there (the API-key lookup)."""
        self.wedged_environ[pid] = threading.Event()
        return self.wedged_environ[pid]

    def opener(self, path: str) -> bytes:
        rel = os.path.relpath(path, self.tree.root)
        pid, _, name = rel.partition(os.sep)
        if name == "cmdline" and pid.isdigit() and int(pid) in self.wedged:
            self.wedged[int(pid)].wait()
        if name == "environ" and pid.isdigit() and int(pid) in self.wedged_environ:
            self.wedged_environ[int(pid)].wait()
        return self.tree.opener(path)

    def release_all(self) -> None:
        for gate in (*self.wedged.values(), *self.wedged_environ.values()):
            gate.set()


class World:
    def __init__(self, tmp_path: Path, discovery: dict | None = None, api_keys: bool = False) -> None:
        self.tree = FakeProcTree(tmp_path / "proc")
        self.tree.add_process(API, 1, SERVER)
        self.tree.add_process(ENGINE, API, ("VLLM::EngineCore",))
        self.proc = WedgedCmdline(self.tree)
        http = FakeHttp(
            {
                ("GET", "/health"): ok(),
                ("GET", "/metrics"): ok(""),
                ("GET", "/v1/models"): ok(json.dumps({"data": [{"id": "m"}]})),
                ("POST", "/v1/completions"): ok(json.dumps({"choices": [{"text": "x"}]})),
            }
        )
        self.clock = FakeClock()
        cfg = parse_config(
            {
                "node": "n1",
                "state_dir": str(tmp_path / "state"),
                "api": {"http": None},
                "discovery": {"stuck_after": 30, "pass_wait": 0.05, **(discovery or {})},
            }
        )
        seams = Seams(self.clock, self.tree.procfs(opener=self.proc.opener), http, FakeRunner(), FakeControl(set()), [])
        self.passes: list[set[str]] = []  # the target names each pass handed its hooks
        hooks = [lambda targets, skip: self.passes.append({t.name for t in targets})]
        self.keys = None
        if api_keys:  # the lookup runtime.py hands the discovery stage, over the same ProcFS
            from vllm_guardian.host.api_keys import ApiKeys

            self.keys = ApiKeys(cfg, seams.proc, environ={})
            hooks.insert(0, self.keys.update)
        self.d = build_daemon(cfg, seams, log=logging.getLogger("test-f20-discovery"), on_discovery=hooks)

    def tick(self) -> None:
        """One tick, which must return: a tick that blocks fails the test instead of hanging it."""
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self.d.tick()
            except BaseException as e:  # noqa: BLE001 - reported below
                failed.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(DEADLINE)
        if t.is_alive():
            pytest.fail("the tick blocked on a discovery read")
        if failed:
            raise failed[0]
        self.d.runner.wait_idle(5)

    def step(self, seconds: int = 1) -> None:
        for _ in range(seconds):
            self.clock.advance(1.0)
            self.tick()

    def discovery_stats(self):
        return self.d.stats.probes["discovery"]

    def stuck_after_wedge(self, pid: int = WEDGED) -> None:
        """The target found, then a wedged process appears and the next pass blocks on it past
        ``stuck_after``."""
        self.step()
        self.proc.wedge(pid)
        self.step(6)  # the next pass starts and blocks
        self.step(31)


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.proc.release_all()
    w.d.runner.shutdown()


def test_a_normal_pass_is_applied_in_the_tick_that_started_it(world):
    world.tick()
    assert list(world.d.tracker.targets) == ["vllm-8000"]
    assert world.passes == [{"vllm-8000"}]


def test_the_loop_keeps_ticking_and_probing_its_target_while_a_pass_is_blocked(world):
    world.step()
    world.proc.wedge(WEDGED)
    world.step(6)
    assert world.d.targets.worker.in_flight  # the pass that reads the wedged cmdline
    ticks, reads = world.d.stats.ticks, world.d.stats.probes["procfs"].runs
    world.step(10)
    assert world.d.stats.ticks == ticks + 10
    assert world.d.stats.probes["procfs"].runs >= reads + 10
    point = world.d.series.latest("vllm-8000", f"p{API}", m.PROC_RSS)
    assert point is not None and point[0] == world.clock.now  # read this very tick
    assert world.d.tracker.targets["vllm-8000"].api_alive


def test_a_stuck_pass_is_reported_once_with_the_file_and_process_it_blocked_on(world, caplog):
    caplog.set_level(logging.WARNING, logger="test-f20-discovery")
    world.stuck_after_wedge()
    world.step(60)
    stuck = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert len(stuck) == 1
    assert f"{WEDGED}/cmdline" in stuck[0] and f"process {WEDGED}" in stuck[0]
    assert world.discovery_stats().failures == 1


def test_the_process_a_pass_blocked_on_is_not_read_again(world):
    world.stuck_after_wedge()
    world.step(120)
    assert world.discovery_stats().failures == 1
    assert not world.d.targets.worker.in_flight


def test_a_server_started_after_the_stuck_pass_is_still_discovered(world):
    world.stuck_after_wedge()
    world.tree.add_process(200, 1, SERVER[:-1] + ("8001",))
    world.step(6)
    assert set(world.d.tracker.targets) == {"vllm-8000", "vllm-8001"}


def test_the_late_result_of_an_abandoned_pass_is_discarded(world):
    world.stuck_after_wedge()
    world.tree.remove(ENGINE)
    world.tree.remove(API)  # the server exits; the blocked pass saw it alive
    world.step(6)
    assert not world.d.tracker.targets["vllm-8000"].api_alive
    hooked = len(world.passes)
    world.proc.release_all()
    _wait_until(lambda: world.d.targets.worker.still_blocked() == 0)
    world.step(6)
    assert not world.d.tracker.targets["vllm-8000"].api_alive
    assert all("vllm-8000" not in names for names in world.passes[hooked:])


def test_discovery_stops_after_four_blocked_passes_and_says_so_keeping_its_targets(world):
    threads_before = threading.active_count()  # other tests' threads may still be winding down
    world.step()
    for pid in (601, 602, 603, 604):  # each pass blocks on the next one (pids are read in order)
        world.proc.wedge(pid)
    world.step(6 + 4 * 31)
    status = world.d.status().to_dict()
    assert "stopped" in status["errors"]["discovery"] and "4 abandoned passes" in status["errors"]["discovery"]
    assert [t["name"] for t in status["targets"]] == ["vllm-8000"]
    assert world.d.tracker.targets["vllm-8000"].api_alive
    # no thread per tick (130 ticks ran): only the four blocked passes and the pools were added
    assert threading.active_count() - threads_before < 4 + 20


def test_the_loop_stops_without_waiting_for_a_blocked_pass(world):
    world.step()
    world.proc.wedge(WEDGED)
    world.step(6)
    stop = threading.Event()
    ticks = []

    def after_tick() -> None:
        ticks.append(1)
        if len(ticks) >= 3:
            stop.set()

    loop = threading.Thread(target=world.d.run, args=(stop, after_tick), daemon=True)
    loop.start()
    loop.join(DEADLINE)
    assert not loop.is_alive() and len(ticks) == 3


def _wait_until(cond) -> None:
    assert poll(cond, DEADLINE, every=0.01), "the released pass never returned"


def test_a_server_whose_environ_read_blocked_a_pass_is_not_read_again_for_its_key(tmp_path):
    """The API-key lookup reads ``/proc/<pid>/environ`` of a server without ``--api-key``: a read
    that does not return gets that pass abandoned once; later passes skip it and complete."""
    world = World(tmp_path, api_keys=True)
    keys = world.keys
    assert keys is not None
    try:
        _environ_read_blocked(world, keys)
    finally:
        world.proc.release_all()
        world.d.runner.shutdown()


def _environ_read_blocked(world, keys):
    world.proc.wedge_environ(API)
    world.step()
    world.step(31)  # the first pass blocks in the key lookup and is abandoned
    done = len(world.passes)
    world.step(30)
    assert world.discovery_stats().failures == 1
    assert world.passes[done:] and world.passes[-1] == {"vllm-8000"}  # later passes end, the server found
    source = keys.source_for(world.d.tracker.targets["vllm-8000"].target.api_url or "")
    assert source.key is None and "blocked a discovery pass" in source.problem

"""Live: orphaned ``VLLM::`` processes found by a real ``guardian run`` (``loop/orphan_watch.py``).

A simulated server's engine spins (busy loop: it no longer reads its pipe) and its API server is
SIGKILLed: the engine, re-parented, holds its memory with no API server above it. The guardian
remembered its pid and start time from the supervised tree: it reports it and, with
``groups.stop_orphans``, stops it. A process that only carries vLLM's title (never supervised) is
reported and never signalled. The report time is printed for docs/measured.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import partial

import psutil
import pytest

from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import GuardianProcess, fire
from tests.support.wait import poll

pytestmark = pytest.mark.live

IMPOSTOR = "import setproctitle, time; setproctitle.setproctitle('VLLM::EngineCore'); time.sleep(120)"


@pytest.fixture
def sim():
    s = SimServer(startup_delay=1.0).start()
    try:
        s.wait_ready(60)
        yield s
    finally:
        s.stop()


@pytest.fixture
def impostor():
    p = subprocess.Popen([sys.executable, "-c", IMPOSTOR])
    try:
        poll(lambda: psutil.Process(p.pid).cmdline()[:1] == ["VLLM::EngineCore"] or None, 10)
        yield p
    finally:
        p.kill()
        p.wait()


def orphans(g: GuardianProcess, pid: int) -> dict | None:
    st = g.status()
    return next((o for o in (st or {}).get("orphans", {}).get("found", []) if o["pid"] == pid), None)


def test_an_orphaned_engine_is_reported_and_stopped_and_a_title_alone_is_only_reported(tmp_path, sim, impostor):
    extra = {
        "groups": {"orphan_interval": 1.0, "orphan_min_rss": 0, "stop_orphans": True},
        # no restart of the dead server (its sequence would stop the tree it snapshotted): the orphan watch acts
        "detectors": {k: {"mode": "alert"} for k in ("engine_dead", "busy_loop", "engine_stall")},
    }
    g = GuardianProcess(tmp_path, sim.port, extra=extra).start()
    try:
        assert g.wait_ready(30), g.log_text()
        engine = sim.engine_pid()
        assert engine is not None
        fire(sim, "busy_loop")  # the engine spins and reads its pipe no more: it outlives its API server
        time.sleep(1.0)
        os.kill(sim.pid, signal.SIGKILL)
        gone = time.time()
        stopped = poll(lambda: not psutil.pid_exists(engine) or psutil.Process(engine).status() == "zombie" or None, 20)
        assert stopped, g.log_text()
        print(f"\norphaned engine stopped {time.time() - gone:.1f}s after its API server was killed")
        seen = poll(partial(orphans, g, impostor.pid), 10)
        assert seen is not None and (seen["provable"], seen["why"], seen["stopped"]) == (False, "title", False)
        assert impostor.poll() is None  # a title alone is never signalled
        assert f"VLLM::EngineCore pid {engine} " in g.log_text() and "has no live API server: stopped" in g.log_text()
    finally:
        assert g.stop() == 0, g.log_text()

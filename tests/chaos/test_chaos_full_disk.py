"""The state dir on a small tmpfs that fills up while an incident opens, re-notifies and resolves: the
guardian keeps running (a full disk never kills it), every alert still reaches Redis in order
and exactly once, and once the disk has room the spool takes writes again."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from vllm_guardian.testing.redis_server import RedisServer

from tests.chaos.chaos_util import needs_root
from tests.support.guardian_process import GuardianProcess, sweep
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll


def fill(path) -> None:
    """Write until the filesystem says ENOSPC."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * size) == size:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def trip(sim: SimServer, fault: str) -> None:
    sim.set_fault(fault)
    threading.Thread(target=lambda: _quiet(lambda: sim.complete("x", max_tokens=4, timeout=60)), daemon=True).start()


def _quiet(fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - the request dies with the fault
        pass


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@needs_root
def test_a_full_state_disk_kills_nothing_and_loses_no_alert(tmp_path, small_tmpfs):
    port = free_port()
    redis = RedisServer(durable=True).start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    g = GuardianProcess(
        tmp_path,
        port,
        extra={
            "state_dir": str(small_tmpfs / "state"),
            "alerts": {"redis_url": redis.url, "renotify_interval": 2},
            "detectors": {"busy_loop": {"mode": "alert", "resolve_after": 1}},
            "evidence": {"record_seconds": 0},
            "discovery": {"forget_after": 3},
        },
    )
    g.state_dir = small_tmpfs / "state"
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        fill(small_tmpfs / "filler")
        trip(sim, "busy_loop")  # opens on a full disk: its file cannot be written, its alert must go
        client = redis.client()

        def events():
            return [(f["id"], __import__("json").loads(f["event"])) for _, f in client.xrange("guardian:alerts")]

        opened = poll(
            lambda: [e for _, e in events() if e.get("kind") == "busy_loop" and e.get("reason") == "opened"], 60
        )
        assert opened, g.log_text()
        assert poll(lambda: [e for _, e in events() if e.get("reason") == "renotify"], 20), [
            (e["reason"], e["kind"]) for _, e in events()
        ]
        sim.stop()  # a spinning engine cannot be cleared: the target goes, its incident resolves
        resolved = poll(
            lambda: [e for _, e in events() if e.get("kind") == "busy_loop" and e.get("reason") == "resolved"], 60
        )
        assert resolved, g.log_text()
        assert g.proc is not None and g.proc.poll() is None, g.log_text()
        assert "No space left on device" in g.log_text()
        os.unlink(small_tmpfs / "filler")
        ids = [i for i, _ in events()]
        assert len(ids) == len(set(ids))  # exactly once
        assert ids == sorted(ids)  # in order (ids are ULIDs)
        st = g.status()
        assert st is not None and st["alerts"]["redis_up"]
    finally:
        sim.stop()
        rc = g.stop()
        redis.stop()
        sweep(port)
    assert rc == 0

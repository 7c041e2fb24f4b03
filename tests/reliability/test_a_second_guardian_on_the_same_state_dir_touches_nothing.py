"""Fault 12: a second ``guardian run`` on the same state dir stops before it starts anything:
the first guardian's Redis keeps running, and no redis-server of the second one is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml

from tests.support.redis_procs import kill_all, servers_for
from tests.support.wait import wait_for


def guardian(config: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", config],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_guardian_on_the_same_state_dir_touches_nothing_of_the_first(tmp_path):
    state = tmp_path / "state"
    config = tmp_path / "g.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(state), "api": {"http": None}, "targets": []}))
    first = guardian(str(config))
    try:
        wait_for(lambda: os.path.exists(state / "guardian.sock"), timeout=30, what="first guardian up")
        (redis_pid,) = servers_for(state)
        second = guardian(str(config))
        _, err = second.communicate(timeout=30)
        assert second.returncode != 0
        assert "another guardian" in err
        assert servers_for(state) == [redis_pid]
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        kill_all(servers_for(state))

"""Fault 21: a guardian killed with SIGKILL leaves its redis-server running in its own session.
The next start stops whatever still serves this state dir: never one more server per crash."""

from __future__ import annotations

import os
import signal

from vllm_guardian.sinks.embedded_redis import EmbeddedRedis

from tests.support.redis_procs import kill_all, servers_for, start_holder


def test_nine_killed_guardians_leave_at_most_the_last_server(tmp_path):
    state = tmp_path / "state"
    try:
        for _ in range(9):
            holder, _pid = start_holder(state)
            holder.kill()
            holder.wait()
        assert len(servers_for(state)) == 1
    finally:
        kill_all(servers_for(state))


def test_a_leftover_that_cannot_answer_and_lost_its_socket_is_still_stopped(tmp_path):
    state = tmp_path / "state"
    holder, orphan = start_holder(state)
    holder.kill()
    holder.wait()
    os.kill(orphan, signal.SIGSTOP)  # wedged: it cannot answer PING or SHUTDOWN
    os.unlink(state / "redis" / "redis.sock")
    fresh = EmbeddedRedis(str(state), stop_timeout=2.0)
    try:
        fresh.start()
        assert servers_for(state) == [fresh.pid]
    finally:
        fresh.stop()
        kill_all([orphan])
    assert servers_for(state) == []

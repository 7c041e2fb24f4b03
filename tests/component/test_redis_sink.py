"""The Redis alert sink against a real redis-server (one per test, on a free port):
delivery to stream and channel, nothing lost across Redis or guardian restarts,
exactly once per event id, a hung Redis never blocks the caller, a bounded spool."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from vllm_guardian.config.schema import AlertsConfig, SpoolConfig
from vllm_guardian.errors import ConfigError
from vllm_guardian.incidents.ids import IdGenerator
from vllm_guardian.sinks.redis_sink import AlertSink, AlertSinkSettings
from vllm_guardian.sinks.redis_client import make_client, mask_url, publish_control, resolve_password
from vllm_guardian.sinks.redis_delivery import RedisDelivery
from vllm_guardian.sinks.spool import Spool
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.wait import wait_for

STREAM = "test:alerts"
CHANNEL = "test:alerts:live"
CONTROL = "test:control"
NODE = "gpu-1"
TIMEOUT = 0.5


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


@pytest.fixture
def sinks():
    made: list[AlertSink] = []
    yield made
    for s in made:
        s.close()


def events(n: int, start: float = 1_700_000_000.0) -> list[dict]:
    ids = IdGenerator()
    return [{"schema": 1, "id": ids(start + i), "status": "firing", "summary": f"event {i}"} for i in range(n)]


def make_sink(sinks, server, state_dir, *, max_events: int = 1000, start: bool = True, **kw) -> AlertSink:
    spool = Spool(state_dir / "spool", max_events=max_events, max_bytes=1 << 20)
    replicas = {k: kw.pop(k) for k in ("wait_replicas", "replica_timeout") if k in kw}  # the sink's own
    settings = AlertSinkSettings(
        node=NODE,
        stream=STREAM,
        channel=CHANNEL,
        control_channel=CONTROL,
        backoff_initial=0.02,
        backoff_max=0.2,
        idle_interval=0.2,
        url_for_log=server.url,
        **kw,
    )
    client = make_client(server.url, timeout=TIMEOUT)
    sink = AlertSink(client=client, spool=spool, settings=settings, start=start, **replicas)
    sinks.append(sink)
    return sink


def stream_ids(client) -> list[str]:
    return [fields["id"] for _eid, fields in client.xrange(STREAM)]


def stream_has(client, n: int):
    return lambda: len(stream_ids(client)) >= n


# ---------------------------------------------------------------- delivery
def test_an_event_reaches_the_stream_and_the_channel(server, sinks, tmp_path):
    watcher = server.client()
    sub = watcher.pubsub()
    sub.subscribe(CHANNEL)
    wait_for(lambda: sub.get_message(timeout=0.1), what="subscribe confirmation")
    sink = make_sink(sinks, server, tmp_path)
    (ev,) = events(1)
    sink.publish(ev)
    msg = wait_for(lambda: sub.get_message(timeout=0.1), what="the live event")
    assert json.loads(msg["data"]) == ev
    (entry,) = watcher.xrange(STREAM)
    assert entry[1]["id"] == ev["id"]
    assert json.loads(entry[1]["event"]) == ev
    sub.close()


def test_delivered_events_leave_the_spool_and_are_counted(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path)
    for ev in events(3):
        sink.publish(ev)
    wait_for(lambda: sink.stats()["delivered_total"] == 3, what="3 deliveries")
    stats = sink.stats()
    assert stats["spooled"] == 0 and stats["redis_up"] is True and stats["last_error"] is None
    assert set(stats) >= {"spooled", "delivered_total", "dropped_total", "redis_up", "last_error"}


def test_the_stream_is_capped(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path, start=False)
    sink._delivery.maxlen = 10
    for ev in events(300):
        sink.publish(ev)
    sink.start()
    wait_for(lambda: sink.stats()["delivered_total"] == 300, what="300 deliveries")
    assert server.client().xlen(STREAM) < 300


# ---------------------------------------------------------------- nothing lost, exactly once
def test_events_published_while_redis_is_down_arrive_in_order_once_it_is_back(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path)
    server.kill()
    evs = events(3)
    for ev in evs:
        sink.publish(ev)
    wait_for(lambda: sink.stats()["redis_up"] is False, what="the sink to notice")
    assert sink.stats()["spooled"] == 3
    server.restart()
    watcher_after = server.client()
    wait_for(stream_has(watcher_after, 3), what="3 events in the stream")
    wait_for(lambda: sink.stats()["spooled"] == 0, what="an empty spool")
    assert stream_ids(watcher_after) == [e["id"] for e in evs]


def test_an_event_delivered_before_the_spool_was_compacted_is_not_delivered_again(server, sinks, tmp_path):
    first = make_sink(sinks, server, tmp_path, start=False)
    evs = events(3)
    for ev in evs:
        first.publish(ev)
    for ev in evs[:2]:  # the flusher got these into Redis, then the guardian died before compaction
        assert first._delivery.deliver(ev) is True
    first.close()
    second = make_sink(sinks, server, tmp_path)
    wait_for(lambda: second.stats()["spooled"] == 0, what="the replay")
    assert stream_ids(server.client()) == [e["id"] for e in evs]
    assert second.stats()["duplicates_total"] == 2


def test_the_delivery_script_refuses_a_second_copy_of_an_id(server):
    client = make_client(server.url, timeout=TIMEOUT)
    delivery = RedisDelivery(client, node=NODE, stream=STREAM, channel=CHANNEL, maxlen=100)
    (ev,) = events(1)
    assert [delivery.deliver(ev), delivery.deliver(ev), delivery.deliver(dict(ev, summary="changed"))] == [
        True,
        False,
        False,
    ]
    assert stream_ids(client) == [ev["id"]]


def test_two_sinks_on_one_spool_deliver_each_event_exactly_once_in_order(server, sinks, tmp_path):
    a = make_sink(sinks, server, tmp_path, start=False)
    b = make_sink(sinks, server, tmp_path, start=False)
    evs = events(20)
    for i, ev in enumerate(evs):
        (a if i % 2 else b).publish(ev)
    a.start()
    b.start()
    wait_for(stream_has(server.client(), 20), what="20 events")
    wait_for(lambda: not a.spool.head(1), what="an empty spool")
    assert stream_ids(server.client()) == [e["id"] for e in evs]


def test_a_restarted_sink_delivers_what_the_previous_one_spooled(server, sinks, tmp_path):
    first = make_sink(sinks, server, tmp_path)
    server.kill()
    evs = events(3)
    for ev in evs:
        first.publish(ev)
    first.close()
    server.restart()
    make_sink(sinks, server, tmp_path)
    wait_for(stream_has(server.client(), 3), what="the replayed events")
    assert stream_ids(server.client()) == [e["id"] for e in evs]


def test_the_delivered_id_set_is_bounded(server):
    client = make_client(server.url, timeout=TIMEOUT)
    delivery = RedisDelivery(client, node=NODE, stream=STREAM, channel=None, maxlen=100, delivered_keep=5)
    for ev in events(12):
        delivery.deliver(ev)
    assert client.zcard(delivery.delivered_key) == 5
    assert delivery.delivered_key == f"{{{STREAM}}}:delivered:{NODE}"


# ---------------------------------------------------------------- a hung Redis
def test_a_hung_redis_never_blocks_publish_and_delivery_resumes(server, sinks, tmp_path):
    admin = server.client()
    sink = make_sink(sinks, server, tmp_path)
    evs = events(4)
    sink.publish(evs[0])
    wait_for(stream_has(admin, 1), what="the first event")
    pause_ms = 3000
    admin.execute_command("CLIENT", "PAUSE", pause_ms, "ALL")
    paused_at = time.monotonic()
    slowest = 0.0
    for ev in evs[1:]:
        t0 = time.monotonic()
        sink.publish(ev)
        slowest = max(slowest, time.monotonic() - t0)
    assert slowest < 0.2 * pause_ms / 1000
    assert time.monotonic() - paused_at < pause_ms / 1000  # all of it happened inside the pause
    wait_for(stream_has(admin, 4), what="delivery after the pause")
    wait_for(lambda: sink.stats()["spooled"] == 0, what="an empty spool")
    assert stream_ids(admin) == [e["id"] for e in evs]


# ---------------------------------------------------------------- the bound
def test_a_full_spool_keeps_the_newest_while_redis_is_down(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path, max_events=3)
    server.kill()
    evs = events(5)
    for ev in evs:
        sink.publish(ev)
    stats = sink.stats()
    assert (stats["spooled"], stats["dropped_total"]) == (3, 2)
    server.restart()
    wait_for(stream_has(server.client(), 3), what="the kept events")
    assert stream_ids(server.client()) == [e["id"] for e in evs[2:]]


def test_the_exporter_counts_the_drops_the_sink_reports(server, sinks, tmp_path):
    """guardian_alerts_dropped_total reads the sink's status section (it once read another key and stayed empty)."""
    import dataclasses

    from vllm_guardian.surface.exporter import GuardianCollector
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

    sink = make_sink(sinks, server, tmp_path, max_events=3)
    server.kill()
    for ev in events(5):
        sink.publish(ev)
    fams = {
        m.name: m
        for m in GuardianCollector(
            lambda: dataclasses.replace(StatusSnapshot.from_dict({}), alerts=sink.status_section())
        ).collect()
    }
    assert [s.value for s in fams["guardian_alerts_dropped"].samples] == [2.0]
    assert [s.value for s in fams["guardian_alerts_spooled"].samples] == [3.0]


def test_a_closed_sink_refuses_to_publish(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path)
    sink.close()
    with pytest.raises(ValueError):
        sink.publish(events(1)[0])


# ---------------------------------------------------------------- control messages (live only)
def test_a_control_message_is_published_live(server, sinks, tmp_path):
    sub = server.client().pubsub()
    sub.subscribe(CONTROL)
    wait_for(lambda: sub.get_message(timeout=0.1), what="subscribe confirmation")
    sink = make_sink(sinks, server, tmp_path)
    assert sink.control({"action": "drain", "target": "llama"}) is True
    msg = wait_for(lambda: sub.get_message(timeout=0.1), what="the control message")
    assert json.loads(msg["data"]) == {"action": "drain", "target": "llama"}
    sub.close()


def test_a_control_message_without_redis_fails_fast_and_is_not_spooled(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path, start=False)
    server.kill()
    t0 = time.monotonic()
    assert sink.control({"action": "undrain"}) is False
    assert time.monotonic() - t0 < TIMEOUT + 1.0
    assert sink.stats()["spooled"] == 0


def test_a_control_message_to_a_hung_redis_gives_up_after_the_timeout(server):
    client = make_client(server.url, timeout=TIMEOUT)
    server.client().execute_command("CLIENT", "PAUSE", 3000, "ALL")
    t0 = time.monotonic()
    assert publish_control(client, CONTROL, {"action": "drain"}) is False
    assert time.monotonic() - t0 < 2.0


# ---------------------------------------------------------------- configuration, secrets
def alerts_cfg(url: str, **kw) -> AlertsConfig:
    return AlertsConfig(
        redis_url=url,
        stream=STREAM,
        channel=CHANNEL,
        timeout=TIMEOUT,
        spool=SpoolConfig(max_events=100, max_bytes=1 << 20),
        **kw,
    )


def test_a_sink_from_config_delivers_with_a_password_from_the_environment(server, sinks, tmp_path):
    server.client().config_set("requirepass", "s3cret")
    sink = AlertSink.from_config(
        alerts_cfg(server.url, password_env="GUARDIAN_TEST_PW"),
        tmp_path,
        NODE,
        environ={"GUARDIAN_TEST_PW": "s3cret"},
        backoff_max=0.2,
    )
    sinks.append(sink)
    sink.publish(events(1)[0])
    reader = server.client(password="s3cret")
    wait_for(stream_has(reader, 1), what="the event")
    assert (tmp_path / "spool").is_dir()


def test_a_wrong_password_keeps_events_spooled(server, sinks, tmp_path):
    server.client().config_set("requirepass", "s3cret")
    pw = tmp_path / "pw"
    pw.write_text("wrong\n")
    sink = AlertSink.from_config(alerts_cfg(server.url, password_file=str(pw)), tmp_path, NODE, backoff_max=0.2)
    sinks.append(sink)
    sink.publish(events(1)[0])
    wait_for(lambda: sink.stats()["last_error"], what="an error")
    assert sink.stats()["spooled"] == 1 and sink.stats()["redis_up"] is False


def test_the_password_never_reaches_the_log(server, sinks, tmp_path, caplog):
    server.client().config_set("requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
    with caplog.at_level(logging.DEBUG):
        sink = AlertSink.from_config(alerts_cfg(url), tmp_path, NODE, backoff_max=0.2)
        sinks.append(sink)
        server.kill()
        sink.publish(events(1)[0])
        wait_for(lambda: sink.stats()["redis_up"] is False, what="the outage")
    assert "s3cret" not in caplog.text
    assert "s3cret" not in json.dumps(sink.stats())
    assert f"redis://:***@127.0.0.1:{server.port}/0" in caplog.text


@pytest.mark.parametrize(
    "url, masked",
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host:6380", "rediss://user:***@host:6380"),
        ("redis://user@host", "redis://user@host"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
        ("unix:///var/lib/guardian/redis/redis.sock", "unix:///var/lib/guardian/redis/redis.sock"),
    ],
)
def test_urls_are_logged_with_the_password_masked(url, masked):
    assert mask_url(url) == masked


def test_the_password_comes_from_the_named_environment_variable():
    assert resolve_password("PW", None, environ={"PW": "x y"}) == "x y"


def test_the_password_file_is_read_without_its_trailing_newline(tmp_path):
    (tmp_path / "pw").write_text("secret\n")
    assert resolve_password(None, str(tmp_path / "pw")) == "secret"


@pytest.mark.parametrize("env, file", [("MISSING_GUARDIAN_PW", None), (None, "/nonexistent/guardian/pw")])
def test_a_missing_password_source_is_a_config_error(env, file):
    with pytest.raises(ConfigError):
        resolve_password(env, file, environ={})


def test_no_password_configured_means_none():
    assert resolve_password(None, None) is None


def test_the_embedded_redis_is_started_by_from_config_and_stopped_by_close(sinks, tmp_path):
    calls: list[object] = []

    class FakeEmbedded:
        def __init__(self, state_dir):
            calls.append(("init", state_dir))

        def start(self):
            calls.append("start")
            return "redis://127.0.0.1:1/0"

        def stop(self):
            calls.append("stop")

    sink = AlertSink.from_config(alerts_cfg("embedded"), tmp_path, NODE, embedded_factory=FakeEmbedded, start=False)
    sink.close()
    assert calls == [("init", str(tmp_path)), "start", "stop"]


def test_a_failing_flush_is_survived_by_the_thread(server, sinks, tmp_path, monkeypatch):
    sink = make_sink(sinks, server, tmp_path, start=False)
    real = sink._delivery
    boom = threading.Event()

    class Flaky:
        def deliver(self, ev):
            if not boom.is_set():
                boom.set()
                raise RuntimeError("unexpected")
            return real.deliver(ev)

    monkeypatch.setattr(sink, "_delivery", Flaky())
    sink_events = events(1)
    sink.publish(sink_events[0])
    sink.start()
    wait_for(lambda: sink.stats()["spooled"] == 0, what="delivery after the surprise")
    assert stream_ids(server.client()) == [sink_ev["id"] for sink_ev in sink_events]


def test_a_batch_no_replica_acknowledges_stays_spooled_and_is_counted(server, sinks, tmp_path):
    sink = make_sink(sinks, server, tmp_path, wait_replicas=1, replica_timeout=0.05)
    evs = events(3)
    for ev in evs:
        sink.publish(ev)
    wait_for(lambda: sink.stats()["unacknowledged_total"] >= 2, what="two unacknowledged rounds")
    stats = sink.stats()
    assert stats["spooled"] == 3 and not stats["redis_up"] and "replica" in (stats["last_error"] or "")
    assert stream_ids(server.client()) == [ev["id"] for ev in evs]  # sent once: the re-sends were skipped by id
    assert stats["duplicates_total"] == 0  # counted only once a batch is acknowledged


def test_a_batch_is_sent_with_its_wait_and_says_which_events_were_new(server):
    client = make_client(server.url, timeout=TIMEOUT)
    delivery = RedisDelivery(
        client, node=NODE, stream=STREAM, channel=None, maxlen=100, replicas=1, replica_timeout=0.05
    )
    evs = events(3)
    delivery.deliver(evs[0])
    news, acked = delivery.deliver_batch(evs)
    assert news == [False, True, True] and acked == 0  # a lone server: no replica holds them
    assert stream_ids(server.client()) == [ev["id"] for ev in evs]

"""The fleet through a real Redis: node heartbeats with a TTL, the fleet listing, and the
alert stream read back (tail, consumer groups, the `guardian alerts` command)."""

from __future__ import annotations

import io
import json
import time

import pytest

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.sinks.fleet import (
    NodeHeartbeat,
    ack,
    alerts_main,
    autoclaim,
    ensure_group,
    fleet_status,
    read_group,
    render_fleet,
    tail,
)
from vllm_guardian.sinks.redis_sink import AlertSink, AlertSinkSettings, AlertsStatus
from vllm_guardian.sinks.redis_client import make_client
from vllm_guardian.surface.heartbeat import node_summary
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.sinks.spool import Spool
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.wait import wait_for

STREAM = "test:alerts"


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


@pytest.fixture
def client(server):
    return server.client()


def nodes(client) -> list[str]:
    return [r["node"] for r in fleet_status(client)]


def add_events(client, n: int) -> list[str]:
    return [
        client.xadd(STREAM, {"id": f"E{i}", "event": json.dumps({"id": f"E{i}", "summary": f"s{i}"})}) for i in range(n)
    ]


# ---------------------------------------------------------------- heartbeats and the fleet
def test_two_nodes_heartbeating_are_both_listed(client):
    hb = NodeHeartbeat(client)
    hb.write("gpu-b", {"version": "0.1.0", "targets": [{"name": "llama", "phase": "serving"}]}, 30)
    hb.write("gpu-a", {"version": "0.1.0", "targets": []}, 30)
    rows = fleet_status(client)
    assert [r["node"] for r in rows] == ["gpu-a", "gpu-b"]
    assert rows[1]["targets"] == [{"name": "llama", "phase": "serving"}]
    assert all(0 < r["ttl_s"] <= 30 for r in rows)


def test_a_node_whose_heartbeat_expired_disappears(client):
    hb = NodeHeartbeat(client)
    hb.write("gpu-a", {}, 0.3)
    hb.write("gpu-b", {}, 30)
    assert nodes(client) == ["gpu-a", "gpu-b"]
    wait_for(lambda: nodes(client) == ["gpu-b"], what="gpu-a to expire")


def test_the_latest_heartbeat_wins(client):
    hb = NodeHeartbeat(client)
    hb.write("gpu-a", {"uptime_s": 1}, 30)
    hb.write("gpu-a", {"uptime_s": 2}, 30)
    (row,) = fleet_status(client)
    assert row["uptime_s"] == 2 and row["node"] == "gpu-a"
    assert client.get("guardian:node:gpu-a") is not None


def test_the_fleet_is_listed_with_scan_never_keys_and_only_heartbeats(client):
    hb = NodeHeartbeat(client)
    for i in range(250):
        hb.write(f"n{i:03d}", {}, 30)
    client.set("{guardian:alerts}:delivered:x", "1")
    client.set("other:node:zz", "{}")
    client.config_resetstat()
    assert nodes(client) == [f"n{i:03d}" for i in range(250)]
    stats = client.info("commandstats")
    assert "cmdstat_scan" in stats and "cmdstat_keys" not in stats


def test_an_unreadable_heartbeat_is_listed_as_such(client):
    client.set("guardian:node:broken", "not json", ex=30)
    (row,) = fleet_status(client)
    assert row["node"] == "broken" and row["error"] == "unreadable heartbeat"


def test_no_heartbeats_means_an_empty_fleet(client):
    assert fleet_status(client) == []


def test_the_sink_writes_the_heartbeat_in_the_background(server, tmp_path):
    sink = AlertSink(
        client=make_client(server.url, timeout=0.5),
        spool=Spool(tmp_path / "spool", max_events=10, max_bytes=1 << 20),
        settings=AlertSinkSettings(node="gpu-9", heartbeat_ttl=30, idle_interval=0.2),
    )
    try:
        sink.heartbeat({"version": "0.1.0"})
        wait_for(lambda: nodes(server.client()) == ["gpu-9"], what="the heartbeat")
        assert 0 < server.client().pttl("guardian:node:gpu-9") <= 30_000
    finally:
        sink.close()


STATUS = {
    "schema": 1,
    "node": "gpu-1",
    "version": "0.1.0",
    "time": 1_700_000_000.0,
    "uptime_s": 12.0,
    "targets": [
        {
            "name": "llama",
            "phase": "incident",
            "pid": 42,
            "port": 8000,
            "model": "m",
            "incidents": ["busy_loop"],
            "processes": [{"pid": 42}],
        },
        {
            "name": "mistral",
            "phase": "serving",
            "pid": 43,
            "port": 8001,
            "model": "m2",
            "incidents": [],
            "processes": [],
        },
    ],
    "incidents": [
        {
            "id": "I1",
            "kind": "busy_loop",
            "severity": "critical",
            "status": "firing",
            "node": "gpu-1",
            "target": {"name": "llama", "pid": 42, "starttime": 1},
            "opened_at": 1_699_999_990.0,
            "signals": {"big": "x" * 1000},
        }
    ],
}

ALERTS = AlertsStatus(
    spooled=2,
    delivered_total=0,
    duplicates_total=0,
    dropped_total=0,
    held_in_memory=0,
    spool_error=None,
    redis_up=True,
    last_error=None,
    url=None,
)


def test_the_node_summary_is_a_compact_status():
    s = node_summary(StatusSnapshot.from_dict(STATUS), ALERTS)
    assert s["targets"][0] == {
        "name": "llama",
        "phase": "incident",
        "pid": 42,
        "port": 8000,
        "model": "m",
        "incidents": ["busy_loop"],
    }
    assert s["incidents"] == [
        {"id": "I1", "kind": "busy_loop", "severity": "critical", "target": "llama", "opened_at": 1_699_999_990.0}
    ]
    assert s["alerts"] == {"spooled": 2, "dropped_total": 0, "redis_up": True}
    assert "processes" not in json.dumps(s)


def test_the_fleet_table_shows_each_node_and_its_troubled_targets():
    row = dict(node_summary(StatusSnapshot.from_dict(STATUS), ALERTS), ttl_s=25.0)
    text = render_fleet([row], now_wall=1_700_000_005.0)
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "VERSION", "SEEN", "TARGETS", "SERVING", "INCIDENTS", "SPOOL"]
    assert lines[1].split() == ["gpu-1", "0.1.0", "5s", "2", "1", "1", "2"]
    assert "llama: incident — busy_loop" in lines[2]
    assert len(lines) == 3


def test_an_empty_fleet_table_says_so():
    assert render_fleet([], now_wall=0.0) == "no guardian heartbeats in Redis"


# ---------------------------------------------------------------- the stream read back
def test_tail_returns_the_last_events_oldest_first(client):
    add_events(client, 5)
    assert [ev["id"] for _eid, ev in tail(client, STREAM, count=3)] == ["E2", "E3", "E4"]


def test_tail_after_an_entry_returns_the_next_ones(client):
    ids = add_events(client, 3)
    assert [eid for eid, _ev in tail(client, STREAM, after=ids[0])] == ids[1:]


def test_tail_waiting_for_nothing_new_returns_empty_after_the_block(client):
    add_events(client, 1)
    t0 = time.monotonic()
    assert tail(client, STREAM, after="$", block_ms=100) == []
    assert time.monotonic() - t0 < 5


def test_an_unreadable_entry_is_shown_not_fatal(client):
    client.xadd(STREAM, {"id": "E9", "event": "{broken"})
    ((_eid, ev),) = tail(client, STREAM)
    assert ev["id"] == "E9" and ev["error"] == "unreadable event"


def test_the_consumer_group_recipe(client):
    assert ensure_group(client, STREAM, "pager") is True
    assert ensure_group(client, STREAM, "pager") is False
    ids = add_events(client, 2)
    got = read_group(client, STREAM, "pager", "c1", count=10)
    assert [eid for eid, _ in got] == ids
    assert read_group(client, STREAM, "pager", "c1") == []  # nothing new
    assert [eid for eid, _ in read_group(client, STREAM, "pager", "c1", pending=True)] == ids
    assert ack(client, STREAM, "pager", ids[0]) == 1
    assert ack(client, STREAM, "pager", ids[0]) == 0
    assert [eid for eid, _ in read_group(client, STREAM, "pager", "c1", pending=True)] == ids[1:]


def test_a_dead_consumers_pending_entries_are_claimed_once_idle(client):
    ensure_group(client, STREAM, "pager")
    ids = add_events(client, 2)
    read_group(client, STREAM, "pager", "dead", count=10)
    assert autoclaim(client, STREAM, "pager", "alive", min_idle_ms=60_000)[1] == []

    def claim_once_idle():
        cursor, claimed = autoclaim(client, STREAM, "pager", "alive", min_idle_ms=20)
        return (cursor, claimed) if claimed else None

    cursor, claimed = wait_for(claim_once_idle, what="entries idle for 20 ms")
    assert cursor == "0-0"
    assert [eid for eid, _ in claimed] == ids
    assert [eid for eid, _ in read_group(client, STREAM, "pager", "alive", pending=True)] == ids


# ---------------------------------------------------------------- `guardian alerts tail|ack`
def run(client, *args, **kw) -> tuple[int, str]:
    out = io.StringIO()
    code = alerts_main(client, *args, stream=STREAM, out=out, **kw)
    return code, out.getvalue()


def test_alerts_tail_prints_one_line_per_event(client):
    add_events(client, 3)
    code, text = run(client, "tail", count=2)
    assert code == 0
    assert [line.split()[-1] for line in text.splitlines()] == ["s1", "s2"]


def test_alerts_tail_json_prints_entry_ids_and_events(client):
    ids = add_events(client, 1)
    code, text = run(client, "tail", as_json=True)
    assert json.loads(text) == {"entry_id": ids[0], "event": {"id": "E0", "summary": "s0"}}


def test_alerts_tail_follow_prints_new_events_until_told_to_stop(client):
    add_events(client, 1)
    rounds = iter([True, False])

    def keep_going():
        if next(rounds):
            client.xadd(STREAM, {"id": "NEW", "event": json.dumps({"id": "NEW", "summary": "fresh"})})
            return True
        return False

    code, text = run(client, "tail", follow=True, block_ms=2000, keep_going=keep_going)
    assert code == 0 and text.splitlines()[-1].endswith("fresh")


def test_alerts_tail_with_a_group_then_ack(client):
    ids = add_events(client, 2)
    code, text = run(client, "tail", group="ops", consumer="me", as_json=True)
    assert code == 0
    shown = [json.loads(line)["entry_id"] for line in text.splitlines()]
    assert shown == ids
    code, text = run(client, "ack", group="ops", entry_ids=shown)
    assert code == 0 and text.strip() == "acknowledged 2 of 2"
    assert read_group(client, STREAM, "ops", "me", pending=True) == []


@pytest.mark.parametrize(
    "args, kw",
    [
        (("ack",), {"group": "ops"}),
        (("ack",), {"entry_ids": ["1-0"]}),
        (("tail",), {"group": "ops"}),
        (("purge",), {}),
    ],
)
def test_alerts_usage_errors_exit_2(client, args, kw):
    assert run(client, *args, **kw)[0] == 2


def test_alerts_without_redis_is_backend_unavailable(server):
    c = make_client(server.url, timeout=0.5)
    server.kill()
    with pytest.raises(BackendUnavailable):
        run(c, "tail")


def test_a_reader_gone_is_not_reported_as_redis_down(client):
    """`guardian alerts tail | head`: the closed pipe ends the command quietly (the CLI exits 141),
    it is not turned into "Redis not reachable"."""

    class ClosedPipe(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    add_events(client, 2)
    with pytest.raises(BrokenPipeError):
        alerts_main(client, "tail", stream=STREAM, out=ClosedPipe())

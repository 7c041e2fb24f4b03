"""A Sentinel failover under load, on real processes: a master, a replica and three sentinels;
three alert sinks (driven as the guardian drives them: ``AlertSink.from_config`` on a
``redis+sentinel://`` URL, a spool each) alerting at a steady rate, a consumer group reading
throughout, three guardians contending for a fleet lease of one slot. The master is SIGKILLed
mid-stream. Then: every alert is in the stream once, in order per node; the consumer group saw each
id (re-deliveries of the group's own failover dropped by id); no two guardians ever acted on the
lease at once; grants stop while no replica can acknowledge them and resume when the old master
rejoins as a replica. The figures measured are printed (``make fleet`` shows them)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_ha import SentinelSet
from tests.support.wait import wait_for
from vllm_guardian.config.schema import AlertsConfig
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.remediation.lease import FleetLease
from vllm_guardian.sinks.fleet import ack, ensure_group, read_group
from vllm_guardian.sinks.redis_client import make_client, redis_errors
from vllm_guardian.sinks.redis_sink import AlertSink

STREAM, GROUP = "guardian:alerts", "pager"
NODES = ("gpu-a", "gpu-b", "gpu-c")
RATE_S = 0.02  # one alert per node every 20 ms: 150 a second across the three


class Consumer(threading.Thread):
    """A consumer of the group that survives the failover: pending entries first after an error,
    then new ones; each id handled once (a re-delivery dropped), each entry acked."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = make_client(url, timeout=2.0)
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.ids: set[str] = set()
        self.duplicates = 0
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        pending = True
        while not self.stop.is_set():
            try:
                got = read_group(self.client, STREAM, GROUP, "c1", count=500, block_ms=200, pending=pending)
                pending = False
            except redis_errors():
                self.errors += 1
                pending = True
                time.sleep(0.1)
                continue
            for _eid, ev in got:
                if ev["id"] in self.ids:
                    self.duplicates += 1
                    continue
                self.ids.add(ev["id"])
                self.seen[ev["node"]].append(ev["seq"])
            if got:
                try:
                    ack(self.client, STREAM, GROUP, *[eid for eid, _ in got])
                except redis_errors():
                    pending = True


class Guardian(threading.Thread):
    """Takes the fleet lease (one slot, replicas must acknowledge), checks its token before its
    'stop', holds it briefly, releases it; records when it acted."""

    def __init__(self, url: str, node: str, acted: list[tuple[float, float, str, int]]) -> None:
        super().__init__(daemon=True)
        self.lease = FleetLease(make_client(url, timeout=1.0), node, 1, 30, "deny", replicas=1, replica_timeout=0.3)
        self.node, self.acted, self.stop = node, acted, threading.Event()
        self.refused_unreplicated = 0

    def run(self) -> None:
        while not self.stop.is_set():
            got = self.lease.acquire("llm")
            if not got.granted:
                self.refused_unreplicated += "replica" in got.reason
                time.sleep(0.05)
                continue
            if self.lease.check("llm", got.slot, got.token).granted:  # the fence, before the stop
                t0 = time.monotonic()
                time.sleep(0.1)  # the restart
                self.acted.append((t0, time.monotonic(), self.node, got.token or 0))
            self.lease.release("llm", got.slot, got.token)
            time.sleep(0.02)


@pytest.mark.timeout(240)
def test_a_master_killed_mid_stream_loses_no_alert_and_no_restart_is_held_twice(tmp_path: Path):
    with SentinelSet(down_after_ms=1000) as ss:
        setup = make_client(ss.url, timeout=2.0)
        ensure_group(setup, STREAM, GROUP)
        alerts = AlertsConfig(redis_url=ss.url, stream=STREAM, channel=STREAM, timeout=1.0)
        sinks = {
            n: AlertSink.from_config(alerts, tmp_path / n, n, backoff_initial=0.05, backoff_max=0.5, idle_interval=0.2)
            for n in NODES
        }
        consumer = Consumer(ss.url)
        consumer.start()
        acted: list[tuple[float, float, str, int]] = []
        guardians = [Guardian(ss.url, n, acted) for n in NODES]
        for g in guardians:
            g.start()
        published: dict[str, int] = {n: 0 for n in NODES}
        max_spooled = [0]
        stop_publishing = threading.Event()

        def publish() -> None:
            while not stop_publishing.is_set():
                for n, sink in sinks.items():
                    sink.publish({"id": new_incident_id(time.time()), "node": n, "seq": published[n], "kind": "t"})
                    published[n] += 1
                max_spooled[0] = max(max_spooled[0], *(s.stats()["spooled"] for s in sinks.values()))
                time.sleep(RATE_S)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        time.sleep(2.0)
        killed_at = time.monotonic()
        old = ss.kill_master()
        new_port = ss.wait_failover(old)
        promoted_at = time.monotonic()
        # the new master has no replica yet: alerts stay spooled (kept, re-sent) and no lease is granted
        wait_for(lambda: sum(s.stats()["unacknowledged_total"] for s in sinks.values()) > 0, timeout=30, what="unacked")
        refused_while_alone = wait_for(
            lambda: sum(g.refused_unreplicated for g in guardians), timeout=30, what="grants refused"
        )
        acted_while_alone = len(acted)
        time.sleep(1.0)
        assert len(acted) == acted_while_alone, "a lease was acted on that no replica held"
        rejoin_at = time.monotonic()
        ss.restart_killed()  # the old master comes back: the sentinels make it a replica of the new one
        wait_for(lambda: all(s.stats()["redis_up"] for s in sinks.values()), timeout=60, what="sinks delivering again")
        delivering_at = time.monotonic()
        wait_for(lambda: len(acted) > acted_while_alone + 2, timeout=60, what="grants after a replica rejoined")
        stop_publishing.set()
        publisher.join(10)
        wait_for(lambda: all(s.stats()["spooled"] == 0 for s in sinks.values()), timeout=60, what="spools empty")
        wait_for(lambda: len(consumer.ids) >= sum(published.values()), timeout=60, what="the consumer caught up")
        consumer.stop.set()
        for g in guardians:
            g.stop.set()
        for g in guardians:
            g.join(10)
        stats = {n: s.stats() for n, s in sinks.items()}
        for s in sinks.values():
            s.close()
        stream = make_client(ss.url, timeout=5.0).xrange(STREAM, "-", "+")

    # every alert in the stream exactly once, in order per node
    import json

    in_stream: dict[str, list[int]] = defaultdict(list)
    ids = [f["id"] for _eid, f in stream]
    for _eid, f in stream:
        ev: dict[str, Any] = json.loads(f["event"])
        in_stream[ev["node"]].append(ev["seq"])
    assert len(ids) == len(set(ids)) == sum(published.values())
    for n in NODES:
        assert in_stream[n] == list(range(published[n])), f"{n}: lost or reordered in the stream"
        assert consumer.seen[n] == list(range(published[n])), f"{n}: lost or reordered in the consumer group"
    # never two guardians acting at once; tokens only grow
    spans = sorted(acted)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "two guardians held the restart at once"
    tokens = [t for *_x, t in spans]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert refused_while_alone > 0  # while no replica could acknowledge: no grant
    # each sink's status says it failed over, and to which master
    new_master = f"127.0.0.1:{new_port}"
    assert all(s["failovers"] == 1 and s["master"] == new_master for s in stats.values()), stats
    print(
        f"\nfleet-ha figures: published {sum(published.values())} alerts ({len(NODES)} nodes, one per "
        f"{RATE_S * 1000:.0f} ms each); failover (kill -> new master named) {promoted_at - killed_at:.2f}s; "
        f"old master restarted -> every sink delivering with a replica's ack {delivering_at - rejoin_at:.2f}s "
        f"(kill -> delivering {delivering_at - killed_at:.2f}s); most spooled on one node {max_spooled[0]}; "
        f"re-sent and skipped by id {sum(s['duplicates_total'] for s in stats.values())}; "
        f"batches kept for want of a replica's ack {sum(s['unacknowledged_total'] for s in stats.values())}; "
        f"consumer-group re-deliveries dropped by id {consumer.duplicates}; lease grants acted on {len(acted)}, "
        f"refused for want of a replica {sum(g.refused_unreplicated for g in guardians)}"
    )


def test_the_report_listener_hears_raw_bytes_and_follows_the_master_across_a_failover():
    import logging

    from vllm_guardian.gates.listener import ReportsListener

    with SentinelSet(down_after_ms=1000) as ss:
        client = make_client(ss.url, timeout=2.0)
        heard: list[bytes | str] = []

        def accept(m: bytes | str, _mono: float, _wall: float) -> str:
            heard.append(m)
            return "ok"

        listener = ReportsListener(
            client, "guardian:reports", accept, time.monotonic, time.time, logging.getLogger("test")
        ).start()
        try:

            def say(what: bytes) -> bool:
                try:
                    client.publish("guardian:reports", what)
                except redis_errors():
                    pass
                time.sleep(0.2)
                return what in heard

            assert listener.subscribed.wait(10)
            wait_for(lambda: say(b"\xff before"), timeout=10, what="heard before the failover")
            ss.wait_failover(ss.kill_master())
            wait_for(lambda: say(b"\xfe after"), timeout=60, what="heard on the new master")
        finally:
            listener.stop()
    assert heard[0] == b"\xff before"  # bytes, not decoded: the intake counts a non-UTF-8 message malformed

"""``python -m benchmarks.fleet_scale``: one Redis as the fleet store of N simulated nodes (default 1 000).

Not N guardians: a publisher per simulated node, each with its own connection (as each guardian has),
driven by a few worker processes. Each node does what a guardian does to the store, through the
guardian's own writers:
- its heartbeat (``sinks/fleet.NodeHeartbeat``: a node summary with two targets, TTL 30 s) every
  ``--heartbeat`` seconds (10 s: the guardian writes it three times per TTL);
- an alert event (``sinks/redis_delivery.RedisDelivery``: the once-per-id Lua script, the stream
  and the channel; an event shaped like a real one, ~1.5 KB) every ``--alert`` seconds;
- a restart lease (``remediation/lease.FleetLease``: acquire, then release when granted) every
  ``--lease`` seconds, each call timed.
Start times are spread over each period. After a warm-up, over a ``--window`` of seconds: the
redis-server's CPU (utime+stime, % of one core), its memory (``INFO``: used_memory, RSS), the ops
the nodes got through, the lease latency (p50/p99 of acquire and of release, client side, including
the worker's own scheduling on a busy machine), the heartbeat and alert write latency; then the
fleet view (``sinks/fleet_view.read_fleet``: every heartbeat, the window's events, the groups) timed
five times while the load goes on.

Writes ``benchmarks/fleet-latest.md`` (and prints it).
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from vllm_guardian.remediation.lease import FleetLease
from vllm_guardian.sinks.fleet import NodeHeartbeat
from vllm_guardian.sinks.fleet_view import read_fleet
from vllm_guardian.sinks.redis_client import make_client
from vllm_guardian.sinks.redis_delivery import RedisDelivery
from vllm_guardian.testing.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "fleet-latest.md"
STREAM = "guardian:alerts"


def summary(node: str, t: float) -> dict[str, Any]:
    """A heartbeat as ``node_summary`` writes it: two targets, one with an open incident."""
    return {
        "version": "0.9.0",
        "time": t,
        "uptime_s": 86400.0,
        "targets": [
            {"name": "llm-0", "phase": "serving", "pid": 4242, "port": 8000, "model": "meta-llama/Llama-3-8B"},
            {"name": "llm-1", "phase": "incident", "pid": 4343, "port": 8001, "model": "meta-llama/Llama-3-8B"},
        ],
        "incidents": [{"id": f"{node}-I1", "kind": "busy_loop", "severity": "critical", "target": "llm-1"}],
        "alerts": {"spooled": 0, "dropped_total": 0, "redis_up": True},
    }


def event(node: str, n: int, t: float) -> dict[str, Any]:
    """An alert event with the fields and the size of a real one."""
    at = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))
    return {
        "schema": 1,
        "id": f"{int(t * 1000):013d}{node[-6:]}{n:08d}",
        "incident_id": f"{node}-I{n}",
        "fingerprint": f"{node}/llm-1/busy_loop",
        "status": "firing",
        "reason": "opened",
        "kind": "busy_loop",
        "severity": "critical",
        "node": node,
        "target": {"name": "llm-1", "pid": 4343, "port": 8001, "model": "meta-llama/Llama-3-8B", "role": "engine_core"},
        "summary": "EngineCore main thread spinning at 100% of a core with no engine progress for 30 s",
        "signals": {"cpu_ratio": 0.99, "threshold": 0.9, "window_s": 30, "steps": 0, "tid": 4350, "pid": 4343},
        "evidence": {"dir": f"/var/lib/guardian/incidents/{node}-I{n}", "files": [f"f{i}.txt" for i in range(20)]},
        "actions": [{"name": "evidence", "status": "ok", "at": at, "detail": "23 files"}],
        "starts_at": at,
        "ends_at": None,
        "timestamp": at,
        "generator": f"vllm-guardian/0.9.0@{node}",
        "runbook": "https://github.com/vllm-guardian/vllm-guardian/blob/main/docs/runbooks/busy_loop.md",
    }


@dataclass(frozen=True)
class Plan:
    url: str
    nodes: list[str]
    heartbeat: float
    alert: float
    lease: float
    start: float  # wall time the measured window starts
    end: float  # wall time the load stops


def worker(plan: Plan, out: Any) -> None:
    """Drive this worker's nodes until ``plan.end``; send back the timings of the measured window."""
    rng = random.Random(os.getpid())
    clients = {n: make_client(plan.url, timeout=5.0) for n in plan.nodes}
    beats = {n: NodeHeartbeat(c) for n, c in clients.items()}
    delivery = {n: RedisDelivery(c, node=n, stream=STREAM, channel=STREAM, maxlen=100_000) for n, c in clients.items()}
    leases = {n: FleetLease(c, n, max_concurrent=1, ttl=900, when_redis_down="deny") for n, c in clients.items()}
    periods = {"heartbeat": plan.heartbeat, "alert": plan.alert, "lease": plan.lease}
    now = time.time()
    queue = [(now + rng.uniform(0, p), n, kind) for n in plan.nodes for kind, p in periods.items()]
    heapq.heapify(queue)
    timings: dict[str, list[float]] = {"heartbeat": [], "alert": [], "acquire": [], "release": []}
    granted, denied, seq = 0, 0, 0
    while queue:
        due, node, kind = heapq.heappop(queue)
        if due >= plan.end:
            break
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        measured = due >= plan.start
        t0 = time.perf_counter()
        if kind == "heartbeat":
            beats[node].write(node, summary(node, time.time()), 30.0)
            spent = {"heartbeat": time.perf_counter() - t0}
        elif kind == "alert":
            seq += 1
            delivery[node].deliver(event(node, seq, time.time()))
            spent = {"alert": time.perf_counter() - t0}
        else:
            got = leases[node].acquire("llm-1")
            spent = {"acquire": time.perf_counter() - t0}
            denied += measured and not got.granted
            if got.granted:
                granted += measured
                t1 = time.perf_counter()
                leases[node].release("llm-1", got.slot)
                spent["release"] = time.perf_counter() - t1
        if measured:
            for k, v in spent.items():
                timings[k].append(v)
        heapq.heappush(queue, (due + periods[kind], node, kind))
    out.put({"timings": timings, "granted": granted, "denied": denied})
    for c in clients.values():
        c.close()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.2f}"


def run(args: argparse.Namespace) -> str:
    with RedisServer() as redis:
        proc = psutil.Process(redis.pid)
        admin = redis.client()
        nodes = [f"node-{i:04d}" for i in range(args.nodes)]
        start = time.time() + args.warmup
        end = start + args.window
        out: Any = mp.get_context("spawn").Queue()
        parts = [nodes[i :: args.workers] for i in range(args.workers)]
        plans = [Plan(redis.url, p, args.heartbeat, args.alert, args.lease, start, end) for p in parts]
        procs = [mp.get_context("spawn").Process(target=worker, args=(plan, out)) for plan in plans]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start - time.time()))
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.time()
        view_times: list[float] = []
        view = None
        while time.time() < end - 1:
            time.sleep(max(0.0, min(args.window / 6, end - 1 - time.time())))
            if len(view_times) < 5 and time.time() > start + args.window / 3:
                v0 = time.perf_counter()
                view = read_fleet(admin, stream=STREAM, now_wall=time.time())
                view_times.append(time.perf_counter() - v0)
        cpu1, t1 = sum(proc.cpu_times()[:2]), time.time()
        info = admin.info("memory")
        clients_info = admin.info("clients")
        stream_len = admin.xlen(STREAM)
        version = admin.info("server").get("redis_version")
        results = [out.get(timeout=args.window + 120) for _ in procs]
        for p in procs:
            p.join(60)
    timings: dict[str, list[float]] = {"heartbeat": [], "alert": [], "acquire": [], "release": []}
    for r in results:
        for k, v in r["timings"].items():
            timings[k].extend(v)
    window = t1 - t0
    cpu = 100.0 * (cpu1 - cpu0) / window
    rows = [
        f"| {k} | {len(v)} | {len(v) / args.window:.1f} | {ms(pct(v, 0.5))} | {ms(pct(v, 0.99))} | "
        f"{ms(max(v, default=None))} |"
        for k, v in timings.items()
    ]
    targets = sum(len(n.targets) for n in view.nodes) if view is not None else 0
    view_p50 = ms(statistics.median(view_times)) if view_times else "-"
    granted, denied = sum(r["granted"] for r in results), sum(r["denied"] for r in results)
    return "\n".join(
        [
            f"# Fleet store at {args.nodes} nodes ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "",
            f"`python -m benchmarks.fleet_scale --nodes {args.nodes} --workers {args.workers} --window {args.window:g} "
            f"--heartbeat {args.heartbeat:g} --alert {args.alert:g} --lease {args.lease:g}` "
            f"(`make bench-fleet`); redis-server {version}, {os.cpu_count()} cores shared.",
            "",
            f"- Redis CPU over the {window:.0f} s window: **{cpu:.1f} % of one core**",
            f"- Redis memory: used_memory **{info['used_memory'] / 2**20:.1f} MiB**, RSS "
            f"{info['used_memory_rss'] / 2**20:.1f} MiB; {clients_info['connected_clients']} connections; "
            f"stream length {stream_len}",
            f"- The fleet view (`read_fleet`: {len(view.nodes) if view else 0} nodes, {targets} targets, "
            f"{view.events_read if view else 0} events of the window): p50 **{view_p50} ms**, "
            f"max {ms(max(view_times, default=None))} ms over {len(view_times)} reads under load",
            f"- Leases in the window: {granted} granted, {denied} "
            "refused (the slot held by another node: one slot, `max_concurrent_restarts: 1`, released at once)",
            "",
            "| operation (client side) | calls in window | per second | p50 ms | p99 ms | max ms |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4, help="processes driving the simulated nodes")
    ap.add_argument("--window", type=float, default=60.0, help="seconds measured")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds of load before the window")
    ap.add_argument("--heartbeat", type=float, default=10.0, help="seconds between a node's heartbeats")
    ap.add_argument("--alert", type=float, default=60.0, help="seconds between a node's alert events")
    ap.add_argument("--lease", type=float, default=60.0, help="seconds between a node's lease attempts")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    text = run(args)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

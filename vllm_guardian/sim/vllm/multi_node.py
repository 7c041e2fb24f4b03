"""The simulated multi-node data-parallel group: a leader and headless ranks as separate process trees.

Like vLLM's multi-node data parallel: the leader (``--data-parallel-size N --data-parallel-size-local L
--data-parallel-address A --data-parallel-rpc-port P``) runs the API server and ranks ``0..L-1``
itself and listens at ``A:P`` for the others; a headless node (``--headless
--data-parallel-start-rank S``) has no HTTP API at all, spawns ``VLLM::EngineCore_DP<k>`` for its
ranks and connects each to the leader. Decides:

- the wire: ``multiprocessing.connection`` over TCP with a fixed authkey (a simulator, loopback
  only); the headless node relays the engine's pipe both ways, so the leader's client of a remote
  rank (``RemoteEngineClient``) speaks the same messages as a local one;
- what the leader's ``/metrics`` shows: every rank's counters labelled ``engine="k"``, the remote
  ones too (``data_parallel.EngineGroup``), so a fault in a headless rank is seen only there;
- faults: ``POST /sim/fault {"rank": k}`` on the leader reaches rank k wherever it runs;
- death: a headless node whose leader connection closes stops its engines and exits (its
  coordinator is gone); a leader whose remote rank's connection closes sees that engine dead
  (``/health`` 503, and it exits, as a vLLM server does when an engine dies).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from vllm_guardian.sim.vllm.engine_client import EngineClient
from vllm_guardian.sim.vllm.engine import EngineConfig, EngineReady, EngineStats, engine_main

LOG = logging.getLogger("guardian.sim_vllm")
AUTHKEY = b"vllm-guardian-sim-dp"  # the simulator's own: a real vLLM uses ZMQ between its nodes
CONNECT_RETRY_S = 0.2
_KILL_GRACE_S = 1.0


class RankHub:
    """The leader's listener at ``--data-parallel-rpc-port``: hands each connecting rank to its client."""

    def __init__(self, address: str, port: int) -> None:
        self._listener = multiprocessing.connection.Listener((address, port), authkey=AUTHKEY)
        self._lock = threading.Lock()
        self._waiting: dict[int, threading.Event] = {}
        self._conns: dict[int, multiprocessing.connection.Connection] = {}
        self._closed = False
        threading.Thread(target=self._accept, name="dp-rpc", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
                rank = conn.recv()  # the first message names the rank the connection carries
            except (OSError, EOFError, multiprocessing.AuthenticationError):
                if self._closed:
                    return
                continue
            if not isinstance(rank, int):
                conn.close()
                continue
            with self._lock:
                old = self._conns.get(rank)
                self._conns[rank] = conn
                ev = self._waiting.setdefault(rank, threading.Event())
            if old is not None:  # a rank reconnects only after its old node went: refused, as vLLM would
                conn.close()
                self._conns[rank] = old
                continue
            ev.set()

    def connection(self, rank: int, stop: threading.Event) -> multiprocessing.connection.Connection | None:
        with self._lock:
            ev = self._waiting.setdefault(rank, threading.Event())
        while not stop.is_set():
            if ev.wait(0.2):
                return self._conns[rank]
        return None

    def close(self) -> None:
        self._closed = True
        self._listener.close()


class RemoteEngineClient(EngineClient):
    """The leader's client of one headless rank: a local client's messages, over the wire, no process."""

    def __init__(self, config: EngineConfig, on_dead: Callable, hub: RankHub) -> None:
        # not EngineClient.__init__: that spawns the engine here; the headless node spawned it there
        self._on_dead = on_dead
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending = {}
        self._dead = threading.Event()
        self.stats = EngineStats(kv_blocks_total=config.kv_blocks)
        self.worker_pid = None
        self._conn = None  # type: ignore[assignment]  # connected in wait_ready
        self._rank = config.dp_rank or 0
        self._hub = hub
        self.remote_pid: int | None = None

    @property
    def pid(self) -> int | None:
        return self.remote_pid  # a pid on the headless node, not on this one

    def start(self) -> None:
        pass  # the headless node starts the engine; ``wait_ready`` waits for it to connect

    def wait_ready(self, stop: threading.Event) -> bool:
        conn = self._hub.connection(self._rank, stop)
        if conn is None:
            return False
        self._conn = conn
        while not stop.is_set():
            if not conn.poll(0.2):
                continue
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return False
            self._dispatch(msg)
            if isinstance(msg, EngineReady):
                self.remote_pid = msg.pid
                return True
        return False

    def _read_outputs(self) -> None:
        while True:
            try:
                self._dispatch(self._conn.recv())
            except (EOFError, OSError):
                break
        with self._lock:
            self._dead.set()
            pending, self._pending = self._pending, {}
        for item in pending.values():
            item.done.set()
        LOG.error("remote data-parallel rank %d disconnected", self._rank)
        self._on_dead(None)

    def shutdown(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _relay(src, dst, done: threading.Event) -> None:
    while not done.is_set():
        try:
            msg = src.recv()
            dst.send(msg)
        except (EOFError, OSError):
            break
    done.set()


def _connect(address: str, port: int, rank: int, stop: threading.Event):
    while not stop.is_set():
        try:
            conn = multiprocessing.connection.Client((address, port), authkey=AUTHKEY)
            conn.send(rank)
            return conn
        except (OSError, EOFError, multiprocessing.AuthenticationError):
            time.sleep(CONNECT_RETRY_S)
    return None


def headless_main(config: EngineConfig, ranks: range, address: str, port: int, stop: threading.Event) -> int:
    """A headless node: spawn the engines of ``ranks``, connect each to the leader, relay until either side goes."""
    ctx = multiprocessing.get_context("spawn")
    procs, done = [], threading.Event()
    for k in ranks:
        mine, theirs = ctx.Pipe()
        cfg = replace(config, dp_rank=k)
        proc = ctx.Process(target=engine_main, args=(theirs, cfg), name=cfg.title.removeprefix("VLLM::"))
        proc.start()
        theirs.close()
        procs.append((k, proc, mine))
    LOG.info("headless: engines %s started; connecting to %s:%d", list(ranks), address, port)
    for k, _proc, mine in procs:
        leader = _connect(address, port, k, stop)
        if leader is None:
            break
        for src, dst in ((mine, leader), (leader, mine)):
            threading.Thread(target=_relay, args=(src, dst, done), name=f"relay-{k}", daemon=True).start()
    while not stop.is_set() and not done.is_set():
        if any(not p.is_alive() for _, p, _ in procs):
            break
        time.sleep(0.2)
    LOG.info("headless: stopping engines (%s)", "asked" if stop.is_set() else "the leader or an engine went")
    for _, proc, mine in procs:
        mine.close()
        if proc.is_alive():
            proc.terminate()
            proc.join(_KILL_GRACE_S)
        if proc.is_alive():
            proc.kill()
            proc.join(_KILL_GRACE_S)
    return 0


def local_ranks(args) -> range:
    """The ranks this node runs (``--data-parallel-start-rank``, ``--data-parallel-size-local``)."""
    local = args.data_parallel_size_local if args.data_parallel_size_local is not None else args.data_parallel_size
    return range(args.data_parallel_start_rank, args.data_parallel_start_rank + local)


def leader_clients(args, local: type) -> Callable:
    """The leader's engine clients: a local engine for its own ranks, a remote one for each other."""
    hub = RankHub(args.data_parallel_address, args.data_parallel_rpc_port)
    mine = local_ranks(args)

    def client(config: EngineConfig, on_dead: Callable):
        return local(config, on_dead) if config.dp_rank in mine else RemoteEngineClient(config, on_dead, hub)

    return client

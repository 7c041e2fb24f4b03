"""The simulated data-parallel server (``--data-parallel-size N``): N engines behind one API server.

Like vLLM's internal load balancing on one node: the API server spawns ``VLLM::DPCoordinator``
(here an idle child, as the real one only relays load counts) and N engines titled
``VLLM::EngineCore_DP<k>`` (``EngineConfig.dp_rank``), each an ordinary simulated engine with
its own queue, KV pool and counters. Decides:

- where a request goes: the rank its ``X-data-parallel-rank`` header names (vLLM honours it), else
  the rank with the fewest requests in flight from this API server, ties taken in turn (a hung
  rank keeps its stuck requests in flight, so new work flows to the others, as in vLLM);
- what ``/metrics`` shows: each engine's own stats, labelled ``engine="k"`` as vLLM labels them;
  ``stats`` (status, dev mode) is their sum;
- faults: to one rank (``rank``) or to all; pause and sleep: to all;
- health: the server is alive only while every engine is (vLLM's engine-dead handling: one rank
  that dies fails the whole server).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import threading
from typing import Any, Callable

from vllm_guardian.sim.vllm.engine import EngineConfig, EngineStats, worker_main

COORDINATOR_TITLE = "VLLM::DPCoordinator"


def multi_node_args(p: argparse.ArgumentParser) -> None:
    """vLLM's multi-node data-parallel flags (``sim.vllm.multi_node``)."""
    p.add_argument("--data-parallel-size-local", type=int, default=None, help="ranks this node runs")
    p.add_argument("--data-parallel-start-rank", type=int, default=0, help="the first rank this node runs")
    p.add_argument("--data-parallel-address", default="127.0.0.1", help="the leader's address")
    p.add_argument("--data-parallel-rpc-port", type=int, default=13345, help="the leader's port for its ranks")
    p.add_argument("--headless", action="store_true", help="no API server: run the ranks, connect to the leader")


def combined(all_stats: list[EngineStats]) -> EngineStats:
    """The sum of several engines' stats (counters, gauges, KV blocks; faults and sleep: any)."""
    out: dict = {}
    for f in dataclasses.fields(EngineStats):
        values = [getattr(s, f.name) for s in all_stats]
        if f.name == "iteration_token_counts":
            out[f.name] = tuple(sum(col) for col in zip(*values, strict=True))
        elif f.name == "faults":
            out[f.name] = tuple(dict.fromkeys(x for v in values for x in v))
        elif f.name == "asleep":
            out[f.name] = any(values)
        else:
            out[f.name] = sum(values)
    return EngineStats(**out)


class EngineGroup:
    """N engine clients (``engine_client.EngineClient``) that look like one to ``SimApp``."""

    def __init__(self, config: EngineConfig, size: int, client: Callable, on_dead) -> None:
        self.engines = [client(dataclasses.replace(config, dp_rank=k), on_dead) for k in range(size)]
        self._lock = threading.Lock()
        self._in_flight = [0] * size
        self._turn = 0
        self._coordinator: multiprocessing.process.BaseProcess | None = None
        self._death_pipe: Any = None

    # -- what SimApp reads

    @property
    def pid(self) -> int | None:
        return self.engines[0].pid

    @property
    def pids(self) -> list[int | None]:
        return [e.pid for e in self.engines]

    @property
    def coordinator_pid(self) -> int | None:
        return self._coordinator.pid if self._coordinator is not None else None

    @property
    def worker_pid(self) -> int | None:
        return self.engines[0].worker_pid

    @property
    def alive(self) -> bool:
        return all(e.alive for e in self.engines)

    @property
    def stats(self) -> EngineStats:
        return combined([e.stats for e in self.engines])

    def per_engine_stats(self) -> list[tuple[str, EngineStats]]:
        return [(str(k), e.stats) for k, e in enumerate(self.engines)]

    # -- lifecycle

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        reader, self._death_pipe = ctx.Pipe(duplex=False)
        self._coordinator = ctx.Process(
            target=worker_main, args=(reader, COORDINATOR_TITLE), name="DPCoordinator", daemon=True
        )
        self._coordinator.start()
        reader.close()
        for e in self.engines:
            e.start()

    def wait_ready(self, stop: threading.Event) -> bool:
        return all(e.wait_ready(stop) for e in self.engines)

    def start_output_thread(self) -> None:
        for e in self.engines:
            e.start_output_thread()

    def shutdown(self) -> None:
        for e in self.engines:
            e.shutdown()
        if self._death_pipe is not None:
            self._death_pipe.close()
        if self._coordinator is not None:
            self._coordinator.join(1.0)

    # -- work

    def submit(self, prompt: str, max_tokens: int, temperature: float, rank: int | None = None):
        k = self._pick(rank)
        try:
            return self.engines[k].submit(prompt, max_tokens, temperature)
        finally:
            with self._lock:
                self._in_flight[k] -= 1

    def set_fault(self, name: str, rate_mb_s: float, rank: int | None = None) -> None:
        for k, e in enumerate(self.engines):
            if rank is None or rank == k:
                e.set_fault(name, rate_mb_s)

    def pause(self, paused: bool, abort: bool = False, sleeping: bool = False) -> None:
        for e in self.engines:
            e.pause(paused, abort, sleeping)

    def ask_paused(self, timeout: float) -> tuple[bool, bool] | None:
        answers = [e.ask_paused(timeout) for e in self.engines]
        if any(a is None for a in answers):
            return None
        return all(a[0] for a in answers if a), all(a[1] for a in answers if a)

    def _pick(self, rank: int | None) -> int:
        with self._lock:
            if rank is not None and 0 <= rank < len(self.engines):
                k = rank
            else:
                n = len(self.engines)
                order = [(self._turn + i) % n for i in range(n)]
                k = min(order, key=lambda i: self._in_flight[i])
                self._turn = (k + 1) % n
            self._in_flight[k] += 1
            return k

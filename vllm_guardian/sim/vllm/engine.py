"""The simulated ``VLLM::EngineCore`` process: a tiny scheduler that steps like vLLM's.

Reads requests and fault orders from its pipe to the API server; decides what runs
each step (continuous batching over a small KV block pool); burns real CPU per step;
writes back finished requests and a stats snapshot after every step, like vLLM's
``SchedulerStats``. It never reports while it hangs, so the API server's gauges and
counters freeze exactly as they do in vLLM.

Faults (ordered through ``SetFault``):
- ``busy_loop``, ``stall``, ``die``: armed; they fire at the next step that has a
  request and cannot be cleared (the main thread spins in ``_ghost_key_spin``,
  blocks forever in ``_wait_on_lock``, or the process exits with status 1);
- ``rss_leak`` (``rate_mb_s`` MiB/s of touched memory, stepping or idle) and
  ``kv_leak`` (finished requests keep their KV blocks): active at once;
- ``none``: stops the two leaks (what already leaked stays leaked).

``--mm-lru-bug`` (the LRU busy loop of vLLM #43941, recurring): every start is armed with ``busy_loop``
unless ``--mm-processor-cache-gb 0`` turns the multi-modal cache off — the catalog's workaround. Its
spin has vLLM's stacks (``sim/vllm/utils/cache.py``): ``LRUCache.popitem`` on ``process_input_sockets``.
``--mm-lru-bug-after N``: the cache fills after N requests of each start, so the loop fires at the
request after them (a canary answered after a restart, then the loop comes back).

Pause and sleep (vLLM's dev-mode ``/pause``, ``/sleep``; ``SetPaused``): a paused engine
schedules nothing (requests stay queued, ``mode=keep``), or first aborts every request
(``abort``: each finishes with ``finish_reason`` ``abort``); ``AskPaused`` is answered from
the engine's own loop, so a hung engine never answers it, as in vLLM (a utility call).

When the pipe from the API server reaches EOF the engine exits (its optional
``VLLM::Worker`` follows through its death pipe) — unless it is hung, as in reality.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import random
import re
import signal
import threading
import time
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field

from vllm_guardian.sim.vllm.watch_dog import WatchDog, parse_config
from vllm_guardian.sim.vllm.utils.cache import spin_on_the_input_thread

ENGINE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"

HANG_FAULTS = ("busy_loop", "stall", "die")
LEAK_FAULTS = ("rss_leak", "kv_leak")
FAULTS = HANG_FAULTS + LEAK_FAULTS + ("none",)

# Upper bounds of vllm:iteration_tokens_total's buckets (+Inf is implied).
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

_VOCAB = (
    "the",
    "engine",
    "steps",
    "once",
    "more",
    "and",
    "every",
    "token",
    "is",
    "a",
    "small",
    "piece",
    "of",
    "work",
    "that",
    "flows",
    "through",
    "cache",
    "blocks",
    "while",
    "guardian",
    "watches",
    "quietly",
    "from",
    "outside",
    "model",
    "says",
    "hello",
    "world",
    "again",
    "today",
    "sim",
)
_EOS_PROBABILITY = 1.0 / 40.0
_MIB = 1 << 20
_IDLE_LEAK_TICK_S = 0.1


@dataclass(frozen=True)
class EngineConfig:
    startup_delay: float = 2.0  # seconds of hot "model loading" before ready
    step_ms: float = 5.0  # CPU burnt per engine step
    with_worker: bool = False  # spawn an idle VLLM::Worker grandchild
    idle_threads: int = 0  # idle threads, like the thread pools of torch, ZMQ and tokenizers
    kv_blocks: int = 64
    block_tokens: int = 16
    max_num_seqs: int = 16
    dp_rank: int | None = None  # one engine of a data-parallel server: titled EngineCore_DP<k>
    # vLLM's multi-modal processor cache (--mm-processor-cache-gb, default 4) and the ghost-key LRU bug
    # of that cache (#43941): with mm_lru_bug the engine starts armed with busy_loop — the loop comes
    # back after every restart — unless the cache is off (0), as the catalog's workaround says.
    mm_processor_cache_gb: float = 4.0
    mm_lru_bug: bool = False
    watchdog_config: str | None = None  # vLLM 0.33's --watchdog-config JSON (sim.vllm.watch_dog)
    mm_lru_after: int = 0  # requests served after each start before the cache fills and the loop fires

    @property
    def title(self) -> str:
        """The process title vLLM sets: ``VLLM::EngineCore``, or ``VLLM::EngineCore_DP<k>`` for a
        rank of a data-parallel server (``set_process_title`` in vLLM's ``run_engine_core``)."""
        return ENGINE_TITLE if self.dp_rank is None else f"{ENGINE_TITLE}_DP{self.dp_rank}"

    @property
    def max_model_len(self) -> int:
        return self.kv_blocks * self.block_tokens


# ---- messages over the pipe -------------------------------------------------


@dataclass(frozen=True)
class AddRequest:
    request_id: str
    prompt: str
    max_tokens: int
    temperature: float


@dataclass(frozen=True)
class SetFault:
    name: str
    rate_mb_s: float = 8.0


@dataclass(frozen=True)
class SetPaused:
    paused: bool
    abort: bool = False  # mode=abort: every queued and running request ends now
    sleeping: bool = False


@dataclass(frozen=True)
class AskPaused:
    request_id: str


@dataclass(frozen=True)
class PauseState:
    request_id: str
    paused: bool
    sleeping: bool


@dataclass(frozen=True)
class RequestDone:
    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"


@dataclass(frozen=True)
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 64
    num_preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success_stop: int = 0
    success_length: int = 0
    iterations: int = 0
    iteration_tokens_sum: int = 0
    # per-bucket (not cumulative) step counts, one per ITERATION_TOKEN_BUCKETS entry, then +Inf
    iteration_token_counts: tuple[int, ...] = (0,) * (len(ITERATION_TOKEN_BUCKETS) + 1)
    faults: tuple[str, ...] = ()
    leaked_bytes: int = 0
    leaked_blocks: int = 0
    asleep: bool = False  # /sleep (not a mere /pause): vllm:engine_sleep_state awake 0

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["iteration_token_counts"] = list(self.iteration_token_counts)
        out["faults"] = list(self.faults)
        out["kv_usage"] = self.kv_usage
        return out


@dataclass(frozen=True)
class EngineReady:
    pid: int
    worker_pid: int | None
    stats: EngineStats


# ---- pure helpers -----------------------------------------------------------

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks, at least one (an empty prompt still has BOS)."""
    return max(1, len(_TOKEN_RE.findall(text)))


def blocks_needed(tokens: int, block_tokens: int) -> int:
    return max(1, math.ceil(tokens / block_tokens))


def bucket_index(tokens: int) -> int:
    for i, bound in enumerate(ITERATION_TOKEN_BUCKETS):
        if tokens <= bound:
            return i
    return len(ITERATION_TOKEN_BUCKETS)


def request_seed(prompt: str, temperature: float, fallback: int) -> int:
    """Greedy (temperature 0) output depends only on the prompt, as with a real model."""
    return zlib.crc32(prompt.encode("utf-8")) if temperature == 0 else fallback


# ---- the hang shapes (named so that py-spy shows them) ----------------------


def _ghost_key_spin() -> None:
    """Evict from an LRU whose touch() re-inserts a missing key: never ends (vLLM #43941)."""
    order: dict[str, None] = {"ghost": None}
    currsize, maxsize = 2, 1
    while currsize > maxsize:
        key = next(iter(order))
        del order[key]
        order[key] = None  # the ghost comes back; currsize never drops


def _wait_on_lock(lock: threading.Lock) -> None:
    """Acquire a lock this thread already holds: a futex wait that never returns."""
    lock.acquire()


def _forward(seconds: float, block: bytes = b"\x17" * 4096) -> None:
    """Real CPU work standing in for a model forward pass."""
    digest = hashlib.sha256()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        digest.update(block)


def start_idle_threads(count: int, stop: threading.Event | None = None) -> threading.Event:
    """``count`` daemon threads blocked on one event (a futex wait), as a pool's idle workers are."""
    stop = stop or threading.Event()
    for i in range(count):
        threading.Thread(target=stop.wait, name=f"pool-{i}", daemon=True).start()
    return stop


# ---- the engine -------------------------------------------------------------


@dataclass
class _Request:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    rng: random.Random
    output: list[str] = field(default_factory=list)
    blocks: int = 0
    prefilled: bool = False
    counted_prompt: bool = False
    finish_reason: str = ""


class _InputClosed(Exception):
    """The API server's end of the pipe is gone."""


class EngineCore:
    """One engine: a waiting queue, a running batch, a KV block pool, counters."""

    def __init__(self, conn, config: EngineConfig, clock=time.monotonic) -> None:
        self._conn = conn
        self._config = config
        self._clock = clock
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._free_blocks = config.kv_blocks
        self._leaked_blocks = 0
        self._armed: str | None = "busy_loop" if config.mm_lru_bug and config.mm_processor_cache_gb > 0 else None
        self._served = 0  # requests finished since this start
        self._fire_after = config.mm_lru_after if self._armed else 0  # a fault set later fires at once
        self._paused = False
        self._sleeping = False
        self._kv_leak = False
        self._rss_rate = 0.0  # bytes per second
        self._leak_since = 0.0
        self._leaked: list[bytes] = []
        self._leaked_bytes = 0
        self._hang_lock = threading.Lock()
        self._seed_source = random.Random()
        self._counters = dict(
            num_preemptions=0,
            prompt_tokens=0,
            generation_tokens=0,
            success_stop=0,
            success_length=0,
            iterations=0,
            iteration_tokens_sum=0,
        )
        self._bucket_counts = [0] * (len(ITERATION_TOKEN_BUCKETS) + 1)
        wd = parse_config(config.watchdog_config)
        self._watchdog = WatchDog(f"engine_{config.dp_rank or 0}", wd).start() if wd is not None else None

    # -- lifecycle

    def load_model(self) -> None:
        """Hot and silent, like weight loading and warm-up."""
        _forward(self._config.startup_delay)

    def run_busy_loop(self) -> None:
        while True:
            busy = not self._paused and (bool(self._running) or self._can_admit())
            if self._conn.poll(0 if busy else self._idle_timeout()):
                self._drain_input()
            self._leak_tick()
            if not self._paused and (self._running or self._can_admit()):
                if self._watchdog is not None:
                    self._watchdog.feed()  # fed per step (vLLM's EngineCore does the same)
                self.step()
            else:
                if self._watchdog is not None:
                    self._watchdog.disable()  # waiting for input: never a stall
                self._send(self.stats())

    # -- one step

    def step(self) -> None:
        if self._armed is not None and self._served >= self._fire_after:
            self._fire(self._armed)
        self._admit()
        scheduled = 0
        for req in list(self._running):
            if req not in self._running:  # preempted by an earlier request of this step
                continue
            if not self._reserve(req):
                continue
            if not req.prefilled:
                scheduled += req.prompt_tokens + len(req.output)
                req.prefilled = True
                if not req.counted_prompt:
                    self._counters["prompt_tokens"] += req.prompt_tokens
                    req.counted_prompt = True
            else:
                scheduled += 1
        _forward(self._config.step_ms / 1000.0)
        finished = []
        for req in list(self._running):
            if not req.prefilled:
                continue
            self._emit_token(req)
            if req.finish_reason:
                finished.append(req)
        for req in finished:
            self._finish(req)
        self._counters["iterations"] += 1
        self._counters["iteration_tokens_sum"] += scheduled
        self._bucket_counts[bucket_index(scheduled)] += 1
        self._leak_tick()
        self._send(self.stats())

    def report_ready(self, worker_pid: int | None) -> None:
        self._send(EngineReady(os.getpid(), worker_pid, self.stats()))

    def stats(self) -> EngineStats:
        faults = [name for name, on in (("rss_leak", self._rss_rate > 0), ("kv_leak", self._kv_leak)) if on]
        if self._armed:
            faults.insert(0, self._armed)
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_blocks_used=self._config.kv_blocks - self._free_blocks,
            kv_blocks_total=self._config.kv_blocks,
            iteration_token_counts=tuple(self._bucket_counts),
            faults=tuple(faults),
            leaked_bytes=self._leaked_bytes,
            leaked_blocks=self._leaked_blocks,
            asleep=self._sleeping,
            **self._counters,
        )

    # -- input

    def _idle_timeout(self) -> float | None:
        return _IDLE_LEAK_TICK_S if self._rss_rate > 0 else None

    def _drain_input(self) -> None:
        try:
            while self._conn.poll(0):
                self._handle(self._conn.recv())
        except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
            raise _InputClosed() from exc

    def _handle(self, msg) -> None:
        if isinstance(msg, AddRequest):
            seed = request_seed(msg.prompt, msg.temperature, self._seed_source.getrandbits(32))
            self._waiting.append(
                _Request(msg.request_id, count_tokens(msg.prompt), max(1, msg.max_tokens), random.Random(seed))
            )
        elif isinstance(msg, SetFault):
            self._set_fault(msg)
        elif isinstance(msg, SetPaused):
            if msg.paused and msg.abort:
                self._abort_all()
            self._paused, self._sleeping = msg.paused, msg.sleeping
        elif isinstance(msg, AskPaused):  # vLLM: is_sleeping = paused (a level-0 sleep) or asleep
            self._send(PauseState(msg.request_id, self._paused, self._paused or self._sleeping))
        if isinstance(msg, SetPaused):
            self._send(self.stats())

    def _abort_all(self) -> None:
        for req in list(self._running) + list(self._waiting):
            if req in self._running:
                self._running.remove(req)
            self._free_blocks += req.blocks
            req.blocks = 0
            self._send(RequestDone(req.request_id, "", req.prompt_tokens, 0, "abort"))
        self._waiting.clear()

    def _set_fault(self, msg: SetFault) -> None:
        if msg.name in HANG_FAULTS:
            if self._armed is None:
                self._fire_after = 0
            self._armed = self._armed or msg.name
        elif msg.name == "rss_leak":
            self._rss_rate = max(0.0, msg.rate_mb_s) * _MIB
            self._leak_since = self._clock()
        elif msg.name == "kv_leak":
            self._kv_leak = True
        elif msg.name == "none":
            self._rss_rate = 0.0
            self._kv_leak = False

    def _send(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
            raise _InputClosed() from exc

    # -- faults

    def _fire(self, name: str) -> None:
        if name == "busy_loop" and self._config.mm_lru_bug:
            spin_on_the_input_thread()  # vLLM's shape of it: the input thread spins, the main thread waits
        elif name == "busy_loop":
            _ghost_key_spin()
        elif name == "stall":
            self._hang_lock.acquire()
            _wait_on_lock(self._hang_lock)
        elif name == "die":
            os._exit(1)

    def _leak_tick(self) -> None:
        if self._rss_rate <= 0:
            return
        now = self._clock()
        due = int(self._rss_rate * (now - self._leak_since))
        if due >= 64 * 1024:
            self._leaked.append(b"\x5a" * due)  # memset: every page is touched
            self._leaked_bytes += due
            self._leak_since = now

    # -- scheduling

    def _can_admit(self) -> bool:
        if not self._waiting or len(self._running) >= self._config.max_num_seqs:
            return False
        head = self._waiting[0]
        return self._free_blocks >= self._blocks_for(head, 1)

    def _admit(self) -> None:
        while self._can_admit():
            req = self._waiting.popleft()
            need = self._blocks_for(req, 1)
            self._free_blocks -= need
            req.blocks = need
            req.prefilled = False
            self._running.append(req)

    def _blocks_for(self, req: _Request, extra: int) -> int:
        return blocks_needed(req.prompt_tokens + len(req.output) + extra, self._config.block_tokens)

    def _reserve(self, req: _Request) -> bool:
        """Make room for req's next token, preempting the newest requests if needed."""
        need = self._blocks_for(req, 1)
        while req.blocks < need:
            if self._free_blocks > 0:
                self._free_blocks -= 1
                req.blocks += 1
                continue
            victim = self._running[-1]
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: _Request) -> None:
        self._running.remove(req)
        self._free_blocks += req.blocks
        req.blocks = 0
        req.prefilled = False
        self._waiting.appendleft(req)
        self._counters["num_preemptions"] += 1

    def _emit_token(self, req: _Request) -> None:
        self._counters["generation_tokens"] += 1
        if req.rng.random() < _EOS_PROBABILITY:
            req.finish_reason = "stop"
            return
        req.output.append(_VOCAB[req.rng.randrange(len(_VOCAB))])
        if len(req.output) >= req.max_tokens:
            req.finish_reason = "length"

    def _finish(self, req: _Request) -> None:
        self._running.remove(req)
        self._served += 1
        if self._kv_leak:
            self._leaked_blocks += req.blocks
        else:
            self._free_blocks += req.blocks
        req.blocks = 0
        self._counters["success_" + req.finish_reason] += 1
        completion = len(req.output) + (1 if req.finish_reason == "stop" else 0)
        self._send(
            RequestDone(
                req.request_id,
                " " + " ".join(req.output) if req.output else "",
                req.prompt_tokens,
                completion,
                req.finish_reason,
            )
        )


# ---- process entry points ---------------------------------------------------


def worker_main(death_conn, title: str = WORKER_TITLE) -> None:
    """An idle ``VLLM::Worker`` (or another idle helper titled ``title``, such as the data-parallel
    coordinator): lives exactly as long as its parent's end of the pipe."""
    import setproctitle

    setproctitle.setproctitle(title)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        death_conn.recv()
    except (EOFError, OSError):
        pass


def _start_worker():
    ctx = multiprocessing.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker_main, args=(reader,), name="Worker", daemon=True)
    proc.start()
    reader.close()
    return proc, writer


def engine_main(conn, config: EngineConfig) -> None:
    """Target of the spawned engine process."""
    import setproctitle

    setproctitle.setproctitle(config.title)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API server handles Ctrl-C for the tree
    worker, death_pipe = _start_worker() if config.with_worker else (None, None)
    start_idle_threads(config.idle_threads)
    core = EngineCore(conn, config)
    core.load_model()
    try:
        core.report_ready(worker.pid if worker else None)
        core.run_busy_loop()
    except _InputClosed:
        pass
    finally:
        if death_pipe is not None:
            death_pipe.close()

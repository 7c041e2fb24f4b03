"""The simulated API server's client of one engine process: spawns it, submits requests, forwards
faults, keeps its last stats and notices its death (``api_server`` and ``multi_node`` use it)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import uuid

from vllm_guardian.sim.vllm.engine import (
    AddRequest,
    AskPaused,
    EngineConfig,
    EngineReady,
    EngineStats,
    WORKER_TITLE,
    PauseState,
    RequestDone,
    SetFault,
    SetPaused,
    engine_main,
)


_ENGINE_KILL_GRACE_S = 1.0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: RequestDone | None = None
        self.state: PauseState | None = None


class EngineClient:
    """Spawns the engine, submits requests, forwards faults, keeps its last stats, notices death."""

    def __init__(self, config: EngineConfig, on_dead) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, self._child_conn = ctx.Pipe()
        name = config.title.removeprefix("VLLM::")  # EngineCore, EngineCore_DP<k>: vLLM's process names
        self._proc = ctx.Process(target=engine_main, args=(self._child_conn, config), name=name)
        self._on_dead = on_dead
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._dead = threading.Event()
        self.stats = EngineStats(kv_blocks_total=config.kv_blocks)
        self.worker_pid: int | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return not self._dead.is_set()

    def per_engine_stats(self) -> list[tuple[str, EngineStats]]:
        """``[(engine label, stats)]``: one engine, labelled "0" as vLLM labels it."""
        return [("0", self.stats)]

    def start(self) -> None:
        self._proc.start()
        self._child_conn.close()

    def wait_ready(self, stop: threading.Event) -> bool:
        """Block until the engine says ready (True), dies, or stop is set (False)."""
        while not stop.is_set():
            ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], timeout=0.2)
            if self._conn in ready:
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    return False
                self._dispatch(msg)
                if isinstance(msg, EngineReady):
                    return True
            elif ready:
                return False
        return False

    def start_output_thread(self) -> None:
        threading.Thread(target=self._read_outputs, name="engine-output", daemon=True).start()

    def submit(self, prompt: str, max_tokens: int, temperature: float, rank: int | None = None) -> RequestDone | None:
        """The finished request, or None when the engine is (or becomes) dead. Never times out.
        ``rank`` (an ``X-data-parallel-rank`` header): one engine serves every rank."""
        pending, request_id = _Pending(), f"cmpl-{uuid.uuid4().hex}"
        with self._lock:
            if self._dead.is_set():
                return None
            self._pending[request_id] = pending
        self._send(AddRequest(request_id, prompt, max_tokens, temperature))
        pending.done.wait()
        return pending.result

    def set_fault(self, name: str, rate_mb_s: float, rank: int | None = None) -> None:
        self._send(SetFault(name, rate_mb_s))

    def pause(self, paused: bool, abort: bool = False, sleeping: bool = False) -> None:
        self._send(SetPaused(paused, abort, sleeping))

    def ask_paused(self, timeout: float) -> tuple[bool, bool] | None:
        """``(paused, sleeping)`` as the engine answers it, None when it does not within ``timeout``."""
        pending, request_id = _Pending(), f"ask-{uuid.uuid4().hex}"
        with self._lock:
            if self._dead.is_set():
                return None
            self._pending[request_id] = pending
        self._send(AskPaused(request_id))
        answered = pending.done.wait(timeout)
        with self._lock:
            self._pending.pop(request_id, None)
        state = pending.state
        return (state.paused, state.sleeping) if answered and state is not None else None

    def shutdown(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(_ENGINE_KILL_GRACE_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(_ENGINE_KILL_GRACE_S)
        if self.worker_pid is not None and _cmdline(self.worker_pid).startswith(WORKER_TITLE):
            try:
                os.kill(self.worker_pid, signal.SIGTERM)
            except OSError:
                pass

    def _send(self, msg) -> None:
        with self._send_lock:
            try:
                self._conn.send(msg)
            except OSError:
                pass  # the engine is gone; the output thread fails what is pending

    def _read_outputs(self) -> None:
        while True:
            ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel])
            if self._conn in ready:
                try:
                    self._dispatch(self._conn.recv())
                    continue
                except (EOFError, OSError):
                    pass
            break
        self._proc.join()
        with self._lock:
            self._dead.set()
            pending, self._pending = self._pending, {}
        for item in pending.values():
            item.done.set()
        self._on_dead(self._proc.exitcode)

    def _dispatch(self, msg) -> None:
        if isinstance(msg, EngineStats):
            self.stats = msg
        elif isinstance(msg, RequestDone):
            with self._lock:
                pending = self._pending.pop(msg.request_id, None)
            if pending is not None:
                pending.result = msg
                pending.done.set()
        elif isinstance(msg, PauseState):
            with self._lock:
                pending = self._pending.pop(msg.request_id, None)
            if pending is not None:
                pending.state = msg
                pending.done.set()
        elif isinstance(msg, EngineReady):
            self.stats, self.worker_pid = msg.stats, msg.worker_pid

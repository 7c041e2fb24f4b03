"""Drive the simulated vLLM server from tests and ``guardian demo``.

``SimServer`` starts ``python -m vllm_guardian.sim.vllm.api_server`` in its own
session, talks to it over loopback HTTP (stdlib ``http.client`` only), and on
``stop()`` leaves nothing behind: it remembers every process of the tree it saw
(pid + starttime, so a reused pid is never signalled) and sweeps its session.
``LoadGenerator`` keeps a few clients sending completions of mixed lengths until it
is stopped, or until its own duration/request bound runs out.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from vllm_guardian import proctree
from vllm_guardian.netaddr import free_port

API_SERVER_MODULE = "vllm_guardian.sim.vllm.api_server"
ENGINE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class SimRequestError(RuntimeError):
    """The simulated server answered with a non-2xx status."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status
        self.body = body


# ---- loopback HTTP ----------------------------------------------------------


def _require_loopback(host: str) -> None:
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"only loopback hosts are allowed, got {host!r}")


def http_request(
    host: str,
    port: int,
    method: str,
    path: str,
    body: dict | None = None,
    timeout: float = 5.0,
    api_key: str | None = None,
) -> tuple[int, bytes]:
    """One request on a fresh connection; (status, body). Raises OSError when refused or timed out.
    ``api_key``: sent as ``Authorization: Bearer`` (a server started with ``--api-key``)."""
    _require_loopback(host)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except http.client.HTTPException as exc:
        raise ConnectionError(str(exc)) from exc
    finally:
        conn.close()


def metric_value(text: str, sample: str, **labels: str) -> float | None:
    """Sum of the samples named ``sample`` whose labels include ``labels``; None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    values = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


# ---- /proc, just enough to track our own tree -------------------------------


@dataclass(frozen=True)
class ProcRef:
    pid: int
    starttime: int


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the comm; index 0 is the state (field 3)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def proc_ref(pid: int) -> ProcRef | None:
    fields = _stat_fields(pid)
    return ProcRef(pid, int(fields[19])) if fields else None


def is_running(ref: ProcRef) -> bool:
    """Same process (pid and starttime) still there and not a zombie."""
    fields = _stat_fields(ref.pid)
    return fields is not None and int(fields[19]) == ref.starttime and fields[0] not in ("Z", "X")


def read_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _every_stat() -> Iterator[tuple[int, list[str]]]:
    """``(pid, fields of /proc/<pid>/stat)`` of every process still there, in one pass over /proc."""
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(int(name))):
            yield int(name), fields


def descendant_pids(pid: int) -> list[int]:
    """Every descendant of ``pid``, breadth-first, from the parent links of one pass over /proc.
    Not /proc/<pid>/task/*/children: proc_tid_children(5) says a child exiting while that file is
    read may leave others out (a live test once got no engine from it after an incident)."""
    return proctree.walk(pid, proctree.children_by_parent((p, int(f[1])) for p, f in _every_stat()))[1:]


def _session_members(sid: int, not_before: int) -> list[ProcRef]:
    return [ProcRef(pid, int(f[19])) for pid, f in _every_stat() if int(f[3]) == sid and int(f[19]) >= not_before]


# ---- the server -------------------------------------------------------------


class SimServer:
    """One simulated vLLM server process tree, owned by the caller."""

    def __init__(
        self,
        port: int | None = None,
        model: str = "sim-model",
        startup_delay: float = 2.0,
        extra_args: tuple[str, ...] | list[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        host: str = "127.0.0.1",
        python: str | None = None,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: start the server with ``--api-key`` and send it on this object's own requests."""
        _require_loopback(host)
        self.api_key = api_key
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.model = model
        self.startup_delay = startup_delay
        self.extra_args = tuple(extra_args)
        self.env = env
        self.log_path = log_path
        self.python = python or sys.executable
        self.process: subprocess.Popen | None = None
        self._root: ProcRef | None = None
        self._seen: dict[int, ProcRef] = {}

    # -- lifecycle

    @property
    def argv(self) -> list[str]:
        return [
            self.python,
            "-m",
            API_SERVER_MODULE,
            "--port",
            str(self.port),
            "--host",
            self.host,
            "--model",
            self.model,
            "--startup-delay",
            str(self.startup_delay),
            *(("--api-key", self.api_key) if self.api_key else ()),
            *self.extra_args,
        ]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("SimServer not started")
        return self.process.pid

    def start(self) -> SimServer:
        if self.process is not None:
            raise RuntimeError("SimServer already started")
        env = dict(os.environ if self.env is None else self.env)
        if self.log_path is not None:
            with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
                self.process = subprocess.Popen(
                    self.argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        else:
            self.process = subprocess.Popen(
                self.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._root = proc_ref(self.process.pid)
        return self

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Poll /health until 200; the seconds waited. RuntimeError if the server exits first, TimeoutError
        at the deadline."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            self._remember_tree()
            if (rc := self.poll()) is not None:
                raise RuntimeError(f"sim server exited with {rc} before ready")
            if self.health(timeout=1.0) == 200:
                self._remember_tree()
                return time.monotonic() - start
            if time.monotonic() >= deadline:
                raise TimeoutError(f"sim server on {self.url} not ready after {timeout} s")
            time.sleep(0.05)

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        if self.process is None:
            raise RuntimeError("SimServer not started")
        return self.process.wait(timeout)

    def send_signal(self, sig: int) -> None:
        self._remember_tree()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, SIGKILL after timeout; then SIGKILL whatever of the tree is left. The exit code."""
        if self.process is None:
            return None
        self._remember_tree()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._remember_tree()
                self.process.kill()
                self.process.wait()
        self._kill_leftovers()
        return self.process.returncode

    def tracked(self) -> tuple[ProcRef, ...]:
        """Every process of the tree seen so far (API server first)."""
        self._remember_tree()
        return tuple(([self._root] if self._root else []) + list(self._seen.values()))

    def leftovers(self) -> tuple[ProcRef, ...]:
        """Tracked processes still running (zombies count as gone)."""
        return tuple(ref for ref in self.tracked() if is_running(ref))

    def __enter__(self) -> SimServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the tree

    def engine_pid(self) -> int | None:
        return self._titled(ENGINE_TITLE)

    def worker_pid(self) -> int | None:
        return self._titled(WORKER_TITLE)

    def rank_pid(self, rank: int) -> int | None:
        """The engine of one data-parallel rank (``VLLM::EngineCore_DP<rank>``)."""
        return self._titled(f"{ENGINE_TITLE}_DP{rank}")

    def _titled(self, title: str) -> int | None:
        self._remember_tree()
        for ref in self._seen.values():
            if is_running(ref) and read_cmdline(ref.pid).startswith(title):
                return ref.pid
        return None

    def _remember_tree(self) -> None:
        if self._root is None or not is_running(self._root):
            return
        for pid in descendant_pids(self._root.pid):
            ref = proc_ref(pid)
            if ref is not None:
                self._seen[ref.pid] = ref

    def _kill_leftovers(self, timeout: float = 5.0) -> None:
        refs = set(self._seen.values())
        if self._root is not None:
            refs.update(_session_members(self._root.pid, self._root.starttime))
        for ref in refs:
            if is_running(ref):
                try:
                    os.kill(ref.pid, signal.SIGKILL)
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        while any(is_running(ref) for ref in refs) and time.monotonic() < deadline:
            time.sleep(0.02)

    # -- HTTP

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        return http_request(self.host, self.port, method, path, body, timeout, self.api_key)

    def health(self, timeout: float = 2.0) -> int | None:
        """/health status, or None when refused or timed out."""
        try:
            return self.request("GET", "/health", timeout=timeout)[0]
        except OSError:
            return None

    def _json(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0) -> dict:
        status, data = self.request(method, path, body, timeout)
        if not 200 <= status < 300:
            raise SimRequestError(status, data)
        return json.loads(data)

    def state(self, timeout: float = 5.0) -> dict:
        return self._json("GET", "/sim/state", timeout=timeout)

    def models(self, timeout: float = 5.0) -> dict:
        return self._json("GET", "/v1/models", timeout=timeout)

    def set_fault(self, name: str, timeout: float = 5.0, **kw) -> dict:
        """Order a fault (busy_loop, stall, die, rss_leak [rate_mb_s=], kv_leak, none)."""
        return self._json("POST", "/sim/fault", {"fault": name, **kw}, timeout)

    # vLLM's dev-mode endpoints (the server started with VLLM_SERVER_DEV_MODE=1)
    def pause(self, mode: str = "keep", timeout: float = 30.0) -> dict:
        return self._json("POST", f"/pause?mode={mode}", None, timeout)

    def resume(self, timeout: float = 5.0) -> dict:
        return self._json("POST", "/resume", None, timeout)

    def sleep(self, level: int = 1, mode: str = "keep", timeout: float = 30.0) -> dict:
        return self._json("POST", f"/sleep?level={level}&mode={mode}", None, timeout)

    def wake_up(self, timeout: float = 5.0) -> dict:
        return self._json("POST", "/wake_up", None, timeout)

    def is_paused(self, timeout: float = 5.0) -> bool:
        return bool(self._json("GET", "/is_paused", timeout=timeout)["is_paused"])

    def is_sleeping(self, timeout: float = 5.0) -> bool:
        return bool(self._json("GET", "/is_sleeping", timeout=timeout)["is_sleeping"])

    def complete(
        self, prompt: str = "hi", max_tokens: int = 8, timeout: float = 30.0, temperature: float = 0.0
    ) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
        return self._json("POST", "/v1/completions", body, timeout)

    def metrics_text(self, timeout: float = 5.0) -> str:
        status, data = self.request("GET", "/metrics", timeout=timeout)
        if status != 200:
            raise SimRequestError(status, data)
        return data.decode()

    def metric(self, sample: str, timeout: float = 5.0, **labels: str) -> float | None:
        return metric_value(self.metrics_text(timeout), sample, **labels)


# ---- load -------------------------------------------------------------------


@dataclass(frozen=True)
class LoadStats:
    ok: int
    errors: int
    elapsed: float
    last_error: str


class LoadGenerator:
    """N client threads sending completions of mixed lengths until stop(), max_duration or max_requests."""

    _WORDS = ("tell", "me", "a", "story", "about", "the", "node", "guardian", "and", "its", "engine")

    def __init__(
        self,
        url: str,
        model: str,
        clients: int = 4,
        prompt_words: tuple[int, int] = (1, 40),
        max_tokens: tuple[int, int] = (1, 48),
        request_timeout: float = 30.0,
        max_duration: float = 300.0,
        max_requests: int = 100_000,
        seed: int = 0,
        api_key: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.api_key = api_key
        _require_loopback(parts.hostname or "")
        if clients < 1:
            raise ValueError("clients must be >= 1")
        self.host, self.port, self.model = parts.hostname or "", parts.port or 80, model
        self.clients = clients
        self.prompt_words, self.max_tokens = prompt_words, max_tokens
        self.request_timeout, self.max_duration, self.max_requests = request_timeout, max_duration, max_requests
        self._seed = seed
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._ok = self._errors = self._issued = 0
        self._last_error = ""
        self._started = self._stopped_at = 0.0

    @property
    def ok(self) -> int:
        return self._ok

    @property
    def errors(self) -> int:
        return self._errors

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> LoadGenerator:
        if self._threads:
            raise RuntimeError("LoadGenerator already started")
        self._started = time.monotonic()
        for i in range(self.clients):
            t = threading.Thread(
                target=self._client, args=(random.Random(self._seed + i),), name=f"load-{i}", daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def stop(self, timeout: float | None = None) -> LoadStats:
        """Ask every client to stop; wait for those in a request (at most request_timeout by default)."""
        self._stop.set()
        deadline = time.monotonic() + (self.request_timeout + 1.0 if timeout is None else timeout)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._stopped_at = self._stopped_at or time.monotonic()
        return self.stats()

    def stats(self) -> LoadStats:
        with self._lock:
            end = self._stopped_at or time.monotonic()
            return LoadStats(self._ok, self._errors, end - self._started if self._started else 0.0, self._last_error)

    def __enter__(self) -> LoadGenerator:
        if not self._threads:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._stop.is_set():  # a test that stopped it (not waiting for hung requests) is not waited on again
            self.stop()

    def _take_ticket(self) -> bool:
        with self._lock:
            if (
                self._stop.is_set()
                or self._issued >= self.max_requests
                or time.monotonic() - self._started >= self.max_duration
            ):
                return False
            self._issued += 1
            return True

    def _client(self, rng: random.Random) -> None:
        while self._take_ticket():
            prompt = " ".join(rng.choice(self._WORDS) for _ in range(rng.randint(*self.prompt_words)))
            body = {
                "model": self.model,
                "prompt": prompt,
                "max_tokens": rng.randint(*self.max_tokens),
                "temperature": rng.choice((0.0, 0.7)),
            }
            try:
                status, data = http_request(
                    self.host, self.port, "POST", "/v1/completions", body, self.request_timeout, self.api_key
                )
                error = "" if status == 200 else f"HTTP {status}: {data[:120]!r}"
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                if error:
                    self._errors += 1
                    self._last_error = error
                else:
                    self._ok += 1
            if error:
                self._stop.wait(0.05)  # do not hammer a refusing server

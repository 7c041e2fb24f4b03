"""Unprivileged ``match.port`` against the real kernel: a real child process listening on a real
port, its fd table refused. These tests run as root here, where the kernel would let every fd
be read, so the refusal is the ProcFS seam's: ``listdir``/``readlink`` of ``/proc/<child>/fd``
raise PermissionError (EACCES), exactly what an unprivileged guardian meets for another user's
process. Everything else (/proc/net/tcp, stat, cmdline) is the real kernel's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from vllm_guardian.config.schema import Config, DiscoveryConfig, MatchConfig, TargetConfig
from vllm_guardian.discovery.scan import discover
from vllm_guardian.host.procfs import ProcFS

pytestmark = pytest.mark.live

SERVER = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))
    s.listen()
    print("listening", flush=True)
    time.sleep(600)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path):
    """``python …/api_server.py --port N``: what discovery takes for a vLLM API server."""
    script = tmp_path / "api_server.py"
    script.write_text(SERVER)
    port = free_port()
    child = subprocess.Popen([sys.executable, str(script), "--port", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "listening"
        yield child.pid, port
    finally:
        child.kill()
        child.wait(10)


def refusing(pid: int) -> ProcFS:
    """The real /proc, with ``<pid>/fd`` refused as the kernel refuses another user's."""

    def guard(path: str) -> str:
        if path.startswith(f"/proc/{pid}/fd"):
            raise PermissionError(13, "Permission denied", path)
        return path

    return ProcFS("/proc", listdir=lambda p: os.listdir(guard(p)), readlink=lambda p: os.readlink(guard(p)))


def by_port(port: int) -> Config:
    return Config(
        targets=(TargetConfig(name="llm", match=MatchConfig(port=port)),),
        discovery=DiscoveryConfig(),
        autodiscover=False,
    )


def test_a_real_server_whose_fds_are_refused_is_found_by_its_argv_port_and_marked_unverified(server):
    pid, port = server
    result = discover(refusing(pid), by_port(port))
    (t,) = result.targets
    assert (t.key.pid, t.port, t.socket, t.port_verified) == (pid, port, "argv", False)
    assert t.api_url == f"http://127.0.0.1:{port}" and result.sockets_denied


def test_the_same_server_with_readable_fds_is_matched_by_its_socket(server):
    pid, port = server
    result = discover(ProcFS("/proc"), by_port(port))
    (t,) = result.targets
    assert (t.key.pid, t.socket, t.port_verified) == (pid, "", True)

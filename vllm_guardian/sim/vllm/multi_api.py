"""The simulated multi-API-server tree (``--api-server-count N``): N front processes, one port.

What vLLM 0.32 does (its ``vllm/entrypoints/cli/serve.py`` and ``vllm/v1/utils.py``): with
``api_server_count > 1`` the ``vllm serve`` process becomes a launcher (``run_multi_api_server``).
It binds the listening socket itself (``setup_server(args, reuse_port=True)`` in
``vllm/entrypoints/launchers/launcher.py``, ``SO_REUSEPORT`` set), starts the engine(s) as its own
children (``launch_core_engines``), then ``APIServerProcessManager`` spawns N processes named
``ApiServer_<i>`` (multiprocessing 'spawn') and hands each the *same* socket object; each runs
``run_api_server_worker_proc``, which retitles itself ``VLLM::APIServer_<i>``
(``set_process_title("APIServer", str(i))``) and serves uvicorn on the inherited socket, talking
to the engines over ZMQ. The launcher keeps no HTTP of its own; it waits on its children
(``wait_for_completion_or_failure``), still holding the socket (``APIServerProcessManager.sock``).
So the tree is: launcher → EngineCore(s) and APIServer_0..N-1, siblings, one listening socket held
by the launcher and shared by the N API servers: the kernel hands each new connection to whichever
of them calls ``accept`` — one whose event loop is blocked takes no new connection.

Here: the launcher keeps the engine client and ``SimApp`` behind a private loopback port; each
``VLLM::APIServer_<i>`` child accepts on the inherited socket and relays every request to that
port (the ZMQ hop in vLLM). ``POST /sim/fault`` with ``"api_server": i`` (any port of the tree)
sends ``busy_loop`` (its main thread stops serving and spins: a blocked event loop) or ``stall``
(stops serving and blocks on a lock forever) to API server ``i`` only; it cannot be cleared.
"""

from __future__ import annotations

import http.client
import logging
import multiprocessing
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vllm_guardian.sim.vllm.engine import _ghost_key_spin, _wait_on_lock

LOG = logging.getLogger("guardian.sim_vllm")
API_SERVER_TITLE = "VLLM::APIServer_{index}"
API_FAULTS = ("busy_loop", "stall")
_RELAYED_HEADERS = ("Authorization", "Content-Type", "X-data-parallel-rank")
_KILL_GRACE_S = 1.0


class ApiServers:
    """The launcher's side: N spawned ``VLLM::APIServer_<i>`` over one shared listening socket."""

    def __init__(self, count: int, sock: socket.socket, backend: tuple[str, int]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._procs: list[Any] = []
        self._pipes: list[Any] = []
        for i in range(count):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=api_server_main, args=(sock, backend, i, reader), name=f"ApiServer_{i}")
            proc.daemon = True
            self._procs.append(proc)
            self._pipes.append((reader, writer))

    @property
    def count(self) -> int:
        return len(self._procs)

    @property
    def pids(self) -> list[int | None]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        for proc, (reader, _writer) in zip(self._procs, self._pipes, strict=True):
            proc.start()
            reader.close()

    def set_fault(self, index: int, name: str) -> None:
        try:
            self._pipes[index][1].send(name)
        except OSError:
            pass  # that API server is gone

    def shutdown(self) -> None:
        for _reader, writer in self._pipes:
            writer.close()
        for proc in self._procs:
            if proc.pid is None:
                continue
            proc.terminate()
            proc.join(_KILL_GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join(_KILL_GRACE_S)


def listening_socket(host: str, port: int) -> socket.socket:
    """The one socket the API servers share, bound like vLLM's ``create_server_socket(reuse_port=True)``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sim-vllm"
    server: _FrontServer

    def log_message(self, format, *args) -> None:
        LOG.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._relay("GET", None)

    def do_POST(self) -> None:
        self._relay("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _relay(self, method: str, body: bytes | None) -> None:
        headers = {h: v for h in _RELAYED_HEADERS if (v := self.headers.get(h)) is not None}
        conn = http.client.HTTPConnection(*self.server.backend)  # no timeout: vLLM's front waits too
        try:
            conn.request(method, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            status, data = answer.status, answer.read()
            kind = answer.getheader("Content-Type") or "application/json"
        except OSError:
            status, data, kind = 500, b'{"error": "engine unreachable"}', "application/json"
        finally:
            conn.close()
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away


class _FrontServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, sock: socket.socket, backend: tuple[str, int]) -> None:
        self.backend = backend
        self.address_family = sock.family
        super().__init__(sock.getsockname()[:2], _Relay, bind_and_activate=False)
        self.socket.close()
        self.socket = sock  # the launcher's socket, as vLLM hands it to every API server


def api_server_main(sock: socket.socket, backend: tuple[str, int], index: int, faults) -> None:
    """Target of a spawned API server: retitle, serve the shared socket, obey the fault pipe."""
    import setproctitle

    setproctitle.setproctitle(API_SERVER_TITLE.format(index=index))
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(levelname)s %(asctime)s [sim_vllm] (APIServer_{index} pid=%(process)d) %(message)s",
    )
    httpd = _FrontServer(sock, backend)
    ordered: list[str] = []

    def read_faults() -> None:
        while True:
            try:
                name = faults.recv()
            except (EOFError, OSError):
                os._exit(0)  # the launcher is gone
            if name in API_FAULTS and not ordered:
                LOG.warning("sim API-server fault: %s", name)
                ordered.append(name)
                httpd.shutdown()  # the main thread leaves serve_forever: no more accept()

    threading.Thread(target=read_faults, name="faults", daemon=True).start()
    httpd.serve_forever(poll_interval=0.1)
    if ordered and ordered[0] == "busy_loop":
        _ghost_key_spin()
    hang = threading.Lock()
    hang.acquire()
    _wait_on_lock(hang)

"""The control socket as hostile input: sixteen clients trickling their request a byte at a time,
two hundred that connect and say nothing, and requests that are no JSON, a megabyte long or
binary, against a real ``guardian run`` beside a healthy simulated vLLM it could restart.

What must hold: the hostile clients are bounded (cut at their deadline or, with such churn, for a
newcomer well before it) and counted (``listeners.socket``), ``guardian status`` over that same
socket and ``/healthz`` answer throughout, and nothing is done to the server (no incident, no
drain, no restart).
"""

from __future__ import annotations

import socket
import threading

from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.wait import poll
from tests.support.watcher import Watcher
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.surface.control_socket import MAX_CLIENTS

TRICKLERS = MAX_CLIENTS
IDLE = 200
JUNK = [b"not json\n", b"[1, 2, 3]\n", b"\xff\xfe\x00binary\n", b'{"cmd": "' + b"x" * (1 << 20) + b'"}\n', b"{}"]


class Hostiles:
    """The hostile clients, each on its own thread, until ``stop``: the tricklers reconnect when cut."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cut = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._trickle, daemon=True) for _ in range(TRICKLERS)]
        self._threads.append(threading.Thread(target=self._junk, daemon=True))
        self.idle: list[socket.socket] = []

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.path)
        return s

    def _trickle(self) -> None:
        while not self._stop.is_set():
            try:
                s = self._connect()
                with s:
                    for byte in b'{"cmd": "status"}\n' * 100:
                        if self._stop.wait(0.2):
                            return
                        s.sendall(bytes([byte]))
            except OSError:
                self.cut += 1  # cut by the guardian: come back

    def _junk(self) -> None:
        while not self._stop.is_set():
            for payload in JUNK:
                try:
                    with self._connect() as s:
                        s.sendall(payload)
                        s.shutdown(socket.SHUT_WR)
                        s.recv(1 << 16)
                except OSError:
                    pass
            self._stop.wait(0.2)

    def __enter__(self) -> Hostiles:
        for _ in range(IDLE):
            try:
                self.idle.append(self._connect())
            except OSError:
                pass
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        for s in self.idle:
            s.close()


def test_hostile_control_socket_clients_are_bounded_counted_and_keep_no_one_out(tmp_path):
    port, http_port = free_port(), free_port()
    sim = SimServer(port=port, startup_delay=0.5).start()
    extra = {"targets": [command_restart(port, tmp_path)], "api": {"http": f"127.0.0.1:{http_port}"}}
    g = GuardianProcess(tmp_path, port, extra=extra)
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        path = str(g.state_dir / "guardian.sock")
        with (
            Hostiles(path) as hostiles,
            Watcher(
                g, f"http://127.0.0.1:{http_port}/healthz", f"http://127.0.0.1:{http_port}/targets/sim/ready"
            ) as watch,
        ):
            counted = poll(
                lambda: (
                    (st := g.status())
                    and (sock := st.get("listeners", {}).get("socket", {}))
                    and sock["evicted"] + sock["timed_out"] >= TRICKLERS + IDLE // 2
                    and st
                ),
                60,
            )
        assert counted, (g.status() or {}).get("listeners")
        assert hostiles.cut >= 1  # the tricklers were cut, not served for as long as they trickled
        assert watch.checks >= 5 and watch.failures == [], watch.failures[:5]
        # nothing done to the server
        assert g.incidents() == [], g.incidents()
        assert sims_on(port) == [sim.pid]
        t = g.require_target()
        assert t["serving"] and not (t.get("remediation") or {}).get("phase")
    finally:
        g.stop()
        sim.stop()
        sweep(port)

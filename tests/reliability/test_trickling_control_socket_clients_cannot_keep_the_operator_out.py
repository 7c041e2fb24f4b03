"""Audit E13: sixteen clients that each send their request one byte at a time held every slot of
the control socket (a per-read timeout restarts with each byte), so the operator's ``guardian
status`` was closed unread for as long as they kept trickling. Each request now has one deadline
from its connection, and when every slot is taken the oldest client still sending is cut for the
newcomer: both counted, real unix-socket clients, a real server."""

from __future__ import annotations

import socket
import threading
import time

from vllm_guardian.surface.control_socket import MAX_CLIENTS, ControlSocket, request

REQUEST = b'{"cmd": "ping", "padding": "' + b"x" * 400 + b'"}\n'


class Trickler:
    """A real client sending ``REQUEST`` one byte every ``every`` seconds until the server
    closes on it; ``sent``: the bytes it got out before that."""

    def __init__(self, path: str, every: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.every = every
        self.sent = 0
        self.cut = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for i in range(len(REQUEST)):
                if self._stop.wait(self.every):
                    return
                self.sock.sendall(REQUEST[i : i + 1])
                self.sent += 1
        except OSError:  # the server closed on it
            self.cut.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_trickling_clients_on_every_slot_do_not_keep_the_operator_out(tmp_path):
    path = str(tmp_path / "g.sock")
    api = ControlSocket(path, {"ping": lambda req: "pong"})  # the defaults: 16 clients, 5 s per request
    api.start()
    hogs = [Trickler(path, every=0.2) for _ in range(MAX_CLIENTS)]
    try:
        time.sleep(0.5)  # all of them connected and trickling: every slot is taken
        assert request(path, {"cmd": "ping"}, timeout=2.0) == "pong"  # at once, not after the trickles
        assert api.status_section().evicted >= 1
    finally:
        for h in hogs:
            h.close()
        api.stop()


def test_a_trickling_client_is_cut_at_its_request_deadline_and_counted(tmp_path):
    path = str(tmp_path / "g.sock")
    api = ControlSocket(path, {"ping": lambda req: "pong"}, read_timeout=1.0)
    api.start()
    hog = Trickler(path, every=0.05)  # the whole request would take ~20 s; each byte well inside a read timeout
    try:
        assert hog.cut.wait(30), f"still held after {hog.sent} bytes"
        assert hog.sent < len(REQUEST)
        assert api.status_section().timed_out == 1
    finally:
        hog.close()
        api.stop()

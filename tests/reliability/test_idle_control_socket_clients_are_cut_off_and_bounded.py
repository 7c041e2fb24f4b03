"""Fault 18: idle clients of the control socket are cut off after a read timeout and only a
bounded number are served at once, so 500 idle connections cannot pile up 500 threads or
keep the operator out for long."""

from __future__ import annotations

import socket
import threading
import time

from vllm_guardian.surface.control_socket import ControlSocket, request


def test_idle_clients_cannot_pile_up_threads_and_are_cut_off(tmp_path):
    path = str(tmp_path / "g.sock")
    api = ControlSocket(path, {"ping": lambda req: "pong"}, read_timeout=0.5, max_clients=8)
    api.start()
    before = threading.active_count()
    idle = []
    try:
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            idle.append(s)
        time.sleep(0.2)
        assert threading.active_count() <= before + 8
        answer = None
        for _ in range(100):  # the idle ones are cut off after the read timeout; the operator gets in
            try:
                answer = request(path, {"cmd": "ping"}, timeout=2.0)
                break
            except (OSError, RuntimeError, ValueError):
                time.sleep(0.1)
        assert answer == "pong"
    finally:
        for s in idle:
            s.close()
        api.stop()

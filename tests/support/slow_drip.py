"""A "vLLM" that accepts, answers a status line and then sends one byte at a time, slowly:
the server that per-read socket timeouts never end."""

from __future__ import annotations

import socket
import threading
import time


class SlowDripServer:
    def __init__(self, interval: float = 0.2, duration: float = 20.0, headers_first: bool = True) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.interval, self.duration, self.headers_first = interval, duration, headers_first
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        body = b"x" * 10_000
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body)
        data = (head + body) if self.headers_first else (head + body)
        end = time.monotonic() + self.duration
        try:
            conn.recv(65536)
            i = 0
            while i < len(data) and time.monotonic() < end and not self._stop.is_set():
                conn.sendall(data[i : i + 1])
                i += 1
                time.sleep(self.interval)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()

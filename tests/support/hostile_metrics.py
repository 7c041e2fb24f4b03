"""A real HTTP server that looks like a healthy vLLM but whose ``/metrics`` names engine labels
never seen before on every page (``sim.vllm.engine_flood``): the input the HTTP probe must bound.

In-process, on a thread; ``/health`` 200, ``/v1/models``, a one-token ``/v1/completions``, and a
``/metrics`` page with a real engine ``"0"`` that progresses (``pages`` served so far) followed by
``flood`` new engines. ``pages`` counts the pages served.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vllm_guardian.sim.vllm.engine_flood import engine_flood


class FloodServer:
    def __init__(self, flood: int) -> None:
        self.flood = flood
        self.pages = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, b"", "text/plain")
                elif self.path == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode(), "application/json")
                elif self.path == "/metrics":
                    self._send(200, server.page().encode(), "text/plain; version=0.0.4")
                else:
                    self._send(404, b"", "text/plain")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = {"choices": [{"text": "x", "index": 0, "finish_reason": "length"}]}
                self._send(200, json.dumps(body).encode(), "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def page(self) -> str:
        with self._lock:
            n = self.pages
            self.pages += 1
        real = (
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {10.0 * n}\n'
        )
        return real + engine_flood(1000 + n * self.flood, self.flood, "m")

    def __enter__(self) -> FloodServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

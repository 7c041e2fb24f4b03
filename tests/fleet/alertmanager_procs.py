"""Real Alertmanagers (Debian's ``prometheus-alertmanager``) for the fleet tier, and a webhook that
hears what they notify.

``Alertmanager(tmp, webhook_url)`` starts one instance on a free port with its own storage folder
and no clustering (``--cluster.listen-address=`` empty): two of them are an HA pair that does not
gossip, which is what the guardian must cope with (each must be sent every alert). Its route sends
everything to the webhook at once (``group_wait`` 0 s, ``group_interval`` 1 s), resolved alerts
included.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from vllm_guardian.netaddr import free_port
from tests.support.guardian_process import stop_session
from tests.support.wait import poll

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class Webhook:
    """An HTTP server that keeps every notification posted to it (JSON), in order."""

    def __init__(self) -> None:
        heard: list[dict[str, Any]] = []
        self.heard = heard

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                heard.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, external_url: str) -> list[dict[str, Any]]:
        """Every alert one Alertmanager notified, with the notification's status."""
        return [a for n in self.heard if n.get("externalURL") == external_url for a in n.get("alerts", [])]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Alertmanager:
    def __init__(self, tmp: Path, webhook_url: str, port: int | None = None) -> None:
        assert BINARY, "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)"
        self.port = port or free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tmp / f"am-{self.port}"
        self.dir.mkdir(parents=True)
        config = {
            "route": {
                "receiver": "hook",
                "group_by": ["node", "kind"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
        }
        (self.dir / "alertmanager.yml").write_text(yaml.safe_dump(config))
        self.log_path = self.dir / "alertmanager.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    BINARY,
                    f"--config.file={self.dir / 'alertmanager.yml'}",
                    f"--storage.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--web.external-url={self.url}",
                    "--cluster.listen-address=",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert poll(self.ready, 30), self.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def alerts(self) -> list[dict[str, Any]]:
        """What ``GET /api/v2/alerts`` lists now (open alerts: a resolved one leaves the list)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=5) as r:
            alerts: list[dict[str, Any]] = json.loads(r.read())
            return alerts

    def stop(self) -> None:
        stop_session(self.proc, grace=5)

"""Helpers the chaos scenarios share: the root-only skip marker, a watcher of readiness and status."""

from __future__ import annotations

import os
import threading
import urllib.request

import pytest

from tests.support.guardian_process import GuardianProcess

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs / writes ns_last_pid")


class Watcher:
    """Polls readiness and status in the background and remembers every time they did not answer."""

    def __init__(self, g: GuardianProcess, ready_url: str) -> None:
        self.g, self.url = g, ready_url
        self.failures: list[str] = []
        self.checks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    if r.status != 200:
                        self.failures.append(f"ready {r.status}")
            except Exception as e:  # noqa: BLE001 - a 503 (drained) or no answer: both are failures here
                self.failures.append(f"ready: {e}")
            if self.g.status() is None:
                self.failures.append("status did not answer")
            self.checks += 1
            self._stop.wait(0.5)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

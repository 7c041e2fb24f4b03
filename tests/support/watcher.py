"""Watches a running guardian from outside while a chaos scenario attacks it: polls its readiness
endpoint and its status command in the background and remembers every time they did not answer."""

from __future__ import annotations

import threading
import urllib.request

from tests.support.guardian_process import GuardianProcess


class Watcher:
    """``with Watcher(g, ready_url) as watch:`` ... then ``watch.failures`` (empty: always answered)
    and ``watch.checks`` (how many times both were asked)."""

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

"""Polls a guardian's answers in the background while a chaos scenario runs, and remembers every
time one did not come: its HTTP listener's URLs (each must answer 200) and ``guardian status``
over its control socket."""

from __future__ import annotations

import threading
import urllib.request

from tests.support.guardian_process import GuardianProcess


class Watcher:
    def __init__(self, g: GuardianProcess, *urls: str, every: float = 0.5) -> None:
        self.g, self.urls, self.every = g, urls, every
        self.failures: list[str] = []
        self.checks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for url in self.urls:
                try:
                    with urllib.request.urlopen(url, timeout=10) as r:
                        if r.status != 200:
                            self.failures.append(f"{url}: {r.status}")
                except Exception as e:  # noqa: BLE001 - a 503 or no answer: both are failures here
                    self.failures.append(f"{url}: {e}")
            if self.g.status() is None:
                self.failures.append("status did not answer")
            self.checks += 1
            self._stop.wait(self.every)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

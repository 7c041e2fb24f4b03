"""Bad input is logged once per episode, counted every time, and visible in status.

An *episode* is a run of consecutive failures of one thing (a probe on a
target, a file that cannot be read). The first failure logs a warning, the
rest only count; the first success after it logs the recovery.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass
class Episode:
    message: str
    since: float
    count: int = 1


class EpisodeLog:
    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.open: dict[str, Episode] = {}
        self.failures_total: dict[str, int] = {}

    def fail(self, key: str, message: str, now: float) -> None:
        group = key.split(":", 1)[0]
        self.failures_total[group] = self.failures_total.get(group, 0) + 1
        ep = self.open.get(key)
        if ep is None:
            self.open[key] = Episode(message, now)
            self.log.warning("%s: %s", key, message)
        else:
            ep.count += 1
            ep.message = message

    def ok(self, key: str) -> None:
        ep = self.open.pop(key, None)
        if ep is not None:
            self.log.info("%s: recovered after %d failure(s)", key, ep.count)

    def forget(self, prefix: str) -> None:
        for key in [k for k in self.open if k.startswith(prefix)]:
            del self.open[key]

    def current(self, prefix: str = "") -> dict[str, str]:
        return {k: f"{e.message} (x{e.count})" for k, e in self.open.items() if k.startswith(prefix)}

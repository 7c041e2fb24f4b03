"""The secret values the guardian holds, scrubbed from everything it writes: the evidence bundle,
incident.json, the diagnosis and report, alert events, and its own log lines.

``redact`` finds a secret by its shape or by the name beside it; a key written bare (``refused
key Zq7Kx93hPl``, a py-spy local named ``k``, an exception quoting a header) has neither. This
knows the values themselves. Each source is a callable returning the values held *now*:
``ApiKeys.secrets`` (the servers' API keys), ``KubeClient.secrets`` (its inline token and the
tokens it read from its file), ``RedisConnection.secrets`` (the Redis password), the gates' trust
keys. They are asked again on every scrub (a rotated key is covered from the next line on); the
compiled pattern is rebuilt only when the set of values changed.

Every occurrence of a value becomes ``<redacted>``: as written, JSON-escaped (a value in a JSON
document) and HTML-escaped (the report page). Values shorter than ``MIN_LENGTH`` are left to the
shape rules: blanking every ``1234`` of a bundle would destroy the evidence, and show which
string the key is. A source that fails is skipped for that scrub (a scrubber never breaks a write).
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from vllm_guardian.redact import REDACTED

MIN_LENGTH = 6
Source = Callable[[], Iterable[str | bytes | None]]


def _forms(value: str) -> set[str]:
    """The ways a value appears in written text: itself, inside a JSON string, in HTML."""
    return {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1], html.escape(value)}


class KnownSecrets:
    """``scrub(text)``: ``text`` with every known secret value replaced. Thread-safe (the capture's
    pool threads and every logging thread call it)."""

    def __init__(self, sources: Iterable[Source] = ()) -> None:
        self._sources = tuple(sources)
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None

    def values(self) -> frozenset[str]:
        """Every value held now that is long enough to scrub (never for printing)."""
        out: set[str] = set()
        for source in self._sources:
            try:
                got = list(source())
            except Exception:  # noqa: BLE001 - a source that fails is skipped, the write goes on
                continue
            for v in got:
                text = v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
                if isinstance(text, str) and len(text.strip()) >= MIN_LENGTH:
                    out.add(text.strip())
        return frozenset(out)

    def _current(self) -> re.Pattern[str] | None:
        values = self.values()
        with self._lock:
            if values != self._values:
                forms = {f for v in values for f in _forms(v) if len(f) >= MIN_LENGTH}
                alternatives = sorted(forms, key=len, reverse=True)  # the longest form wins where they overlap
                self._pattern = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None
                self._values = values
            return self._pattern

    def scrub(self, text: str) -> str:
        """``text`` with every known secret value (and its JSON and HTML forms) as ``<redacted>``."""
        if not text or not self._sources:
            return text
        pattern = self._current()
        return pattern.sub(REDACTED, text) if pattern is not None else text

    def scrub_doc(self, node: Any) -> Any:
        """A JSON-like document (an alert event) with every string, key or value, scrubbed."""
        if isinstance(node, str):
            return self.scrub(node)
        if isinstance(node, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub_doc(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.scrub_doc(v) for v in node]
        return node

    def __call__(self, text: str) -> str:
        return self.scrub(text)

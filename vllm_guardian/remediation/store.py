"""Where restart sequences live between guardian processes: ``<state_dir>/remediation/<target>.json``.

Each write is atomic (``fsutil.atomic_write``). A disk that refuses (ENOSPC, EIO) is logged once per
episode per target and reported (``save`` returns False); an unreadable file is logged and skipped
by ``load_all`` (it never stops the guardian from starting).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from vllm_guardian.fsutil import atomic_write
from vllm_guardian.remediation.sequence import RestartSequence


class SequenceStore:
    def __init__(self, state_dir: str, log: logging.Logger) -> None:
        self.dir = Path(state_dir) / "remediation"
        self.log = log
        self._failing: set[str] = set()  # targets whose state file could not be written (logged once)

    def path(self, target: str) -> Path:
        return self.dir / f"{target}.json"

    def save(self, seq: RestartSequence) -> bool:
        path = self.path(seq.target)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(seq.to_json()))
        except OSError as e:
            if seq.target not in self._failing:
                self._failing.add(seq.target)
                self.log.error("remediation %s: state could not be written to %s: %s", seq.target, path, e)
            return False
        self._failing.discard(seq.target)
        return True

    def load_all(self) -> list[RestartSequence]:
        """Every readable sequence, in file-name order."""
        if not self.dir.is_dir():
            return []
        found = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                found.append(RestartSequence.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as e:
                self.log.warning("ignoring unreadable remediation state %s: %s", path, e)
        return found

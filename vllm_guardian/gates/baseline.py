"""Baselines per (target, model, vLLM version), persisted under ``<state_dir>/gates/``.

A baseline is what the target answered when first seen healthy: the diagnostic and
shadow answers (text, fingerprint, the L1 problem codes they already had — a model
whose healthy answers contain control characters is judged against itself), and
the first ``baseline_samples`` reference perplexities (their median is the L2
baseline). One JSON file per key, written atomically (``fsutil.atomic_write``), mode 0600.

A file that cannot be read or parsed (garbage, binary, a JSON nest too deep for the parser, the
wrong schema) is reported as a problem line and treated as absent: the target is re-baselined
and the bad file overwritten; nothing raises.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from vllm_guardian.fsutil import atomic_write

FORMAT = 1
FILE_MODE = 0o600  # a baseline holds the model's answers: the guardian's own
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Baseline:
    target: str
    model: str
    version: str
    taken_at: float  # wall time of the first round
    answers: dict[str, str] = field(default_factory=dict)  # prompt -> answer text
    fingerprints: dict[str, str] = field(default_factory=dict)  # prompt -> L4 fingerprint
    format_codes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # prompt -> L1 codes already there
    perplexities: tuple[float, ...] = ()
    tokens: dict[str, tuple[str, ...]] = field(default_factory=dict)  # prompt -> answer tokens (near-tie checks)

    def with_perplexity(self, value: float) -> Baseline:
        return replace(self, perplexities=self.perplexities + (value,))

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "target": self.target,
            "model": self.model,
            "version": self.version,
            "taken_at": self.taken_at,
            "answers": dict(self.answers),
            "fingerprints": dict(self.fingerprints),
            "format_codes": {k: list(v) for k, v in self.format_codes.items()},
            "perplexities": list(self.perplexities),
            "tokens": {k: list(v) for k, v in self.tokens.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> Baseline:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a gates baseline (format %r)" % (d.get("format") if isinstance(d, dict) else d))
        for key, tp in (
            ("target", str),
            ("model", str),
            ("version", str),
            ("taken_at", (int, float)),
            ("answers", dict),
            ("fingerprints", dict),
            ("format_codes", dict),
            ("perplexities", list),
        ):
            if not isinstance(d.get(key), tp):
                raise ValueError(f"field {key!r} missing or of the wrong type")
        if not all(isinstance(v, (int, float)) for v in d["perplexities"]):
            raise ValueError("field 'perplexities' must hold numbers")
        tokens = d.get("tokens") or {}
        if not isinstance(tokens, dict):
            raise ValueError("field 'tokens' must be a mapping")
        return cls(
            d["target"],
            d["model"],
            d["version"],
            float(d["taken_at"]),
            {str(k): str(v) for k, v in d["answers"].items()},
            {str(k): str(v) for k, v in d["fingerprints"].items()},
            {str(k): tuple(str(c) for c in v) for k, v in d["format_codes"].items()},
            tuple(float(v) for v in d["perplexities"]),
            {str(k): tuple(str(t) for t in v) for k, v in tokens.items()},
        )


class BaselineStore:
    def __init__(self, state_dir: str) -> None:
        self.dir = Path(state_dir) / "gates"

    def path(self, target: str, model: str, version: str) -> Path:
        digest = hashlib.sha256(f"{model}\x1f{version}".encode()).hexdigest()[:12]
        return self.dir / f"baseline-{_SAFE.sub('_', target)}-{digest}.json"

    def load(self, target: str, model: str, version: str) -> tuple[Baseline | None, str | None]:
        """(baseline or None, a problem line when a file was there but unusable)."""
        p = self.path(target, model, version)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, None
        except (OSError, UnicodeDecodeError) as e:
            return None, f"baseline {p} unreadable ({e}): re-baselining"
        try:
            b = Baseline.from_dict(json.loads(text))
        except RecursionError:  # a JSON nest deeper than the parser's recursion limit
            return None, f"baseline {p} corrupted (nested too deep to parse): re-baselining"
        except (ValueError, TypeError) as e:
            return None, f"baseline {p} corrupted ({e}): re-baselining"
        if (b.target, b.model, b.version) != (target, model, version):
            return None, f"baseline {p} is for {b.target}/{b.model}/{b.version}: re-baselining"
        return b, None

    def save(self, b: Baseline) -> str | None:
        """Writes atomically; a problem line on failure (the in-memory baseline still serves)."""
        p = self.path(b.target, b.model, b.version)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(p, json.dumps(b.to_dict(), ensure_ascii=False, indent=1), mode=FILE_MODE)
        except OSError as e:
            return f"cannot write baseline {p}: {e}"
        return None

    def discard(self, target: str) -> int:
        """Removes every baseline of a target (after a verified restart); how many went."""
        n = 0
        for p in self.dir.glob(f"baseline-{_SAFE.sub('_', target)}-*.json"):
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
        return n

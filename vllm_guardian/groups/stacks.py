"""A node's answer to a group ``capture`` request: where it wrote its ranks' stacks (pure).

Each node that captured the py-spy stacks of its own ranks for a group incident answers with
``{v, group, incident, node, time, files: [{rank, path}], failed: [...]}`` signed with the trust
keys. The lease holder's guardian reads the answers and links them on its incident. An answer read
back from the fleet store is outside input: ``decode`` believes only a signed, fresh answer for the
group and node it is filed under, at most ``MAX_BYTES``, ``MAX_FILES`` files, paths of plain
characters. It never makes anyone act: it is a link shown on the incident.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from vllm_guardian.gates import trust

SCHEMA = 1
MAX_BYTES = 8 * 1024
MAX_FILES = 64
MAX_AGE = 300.0
CLOCK_SKEW = 30.0
_ID = re.compile(r"^[A-Za-z0-9_.:/@\[\]-]{1,160}$")
_PATH = re.compile(r"^/[A-Za-z0-9_.:/@+=-]{1,255}$")
_REASON = re.compile(r"^[ -~]{1,160}$")  # printable ASCII


@dataclass(frozen=True)
class Stacks:
    group: str
    incident: str
    node: str
    time: float
    files: tuple[tuple[int, str], ...]  # (rank, path on that node)
    failed: tuple[str, ...] = ()  # "rank k: why"

    def line(self) -> str:
        done = [f"rank {r} {p}" for r, p in self.files]
        return f"{self.node}: " + "; ".join(done + list(self.failed))


@dataclass(frozen=True)
class Refused:
    reason: str
    detail: str


def encode(s: Stacks, keys: trust.Keys) -> str:
    body = {
        "v": SCHEMA,
        "group": s.group,
        "incident": s.incident,
        "node": s.node,
        "time": s.time,
        "files": [{"rank": r, "path": p} for r, p in s.files],
        "failed": list(s.failed),
    }
    return json.dumps(trust.sign(body, keys), sort_keys=True, separators=(",", ":"))


def decode(raw: str | bytes, keys: trust.Keys, *, group: str, node: str, now: float) -> Stacks | Refused:
    """The answer filed under (``group``, ``node``), or why it is not believed. Never raises."""
    if not keys.enabled:
        return Refused("untrusted", "no trust keys")
    if len(raw) > MAX_BYTES:
        return Refused("malformed", f"over {MAX_BYTES} bytes")
    try:
        doc: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return Refused("malformed", "not JSON")
    if not isinstance(doc, dict):
        return Refused("malformed", "not a JSON object")
    bad = trust.check(doc, keys)
    if bad is not None:
        return Refused(*bad)
    if doc.get("v") != SCHEMA or doc.get("group") != group or doc.get("node") != node:
        return Refused("misfiled", "another schema, group or node than the one it is filed under")
    incident, when = doc.get("incident"), doc.get("time")
    if not isinstance(incident, str) or not _ID.match(incident):
        return Refused("malformed", "incident is not an incident id")
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        return Refused("malformed", "time is not a finite number")
    if when > now + CLOCK_SKEW or now - when > MAX_AGE:
        return Refused("stale", f"time {when:.0f} is outside the last {MAX_AGE:.0f} s")
    files, failed = doc.get("files"), doc.get("failed", [])
    if not isinstance(files, list) or len(files) > MAX_FILES or not isinstance(failed, list) or len(failed) > MAX_FILES:
        return Refused("malformed", f"files/failed are not lists of at most {MAX_FILES}")
    out: list[tuple[int, str]] = []
    for f in files:
        rank = f.get("rank") if isinstance(f, dict) else None
        path = f.get("path") if isinstance(f, dict) else None
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1024:
            return Refused("malformed", "a file's rank is not in 0..1023")
        if not isinstance(path, str) or not _PATH.match(path) or ".." in path:
            return Refused("malformed", "a file's path is not a plain absolute path")
        out.append((rank, path))
    if any(not isinstance(x, str) or not _REASON.match(x) for x in failed):
        return Refused("malformed", "a failure is not a line of printable text")
    return Stacks(group=group, incident=incident, node=node, time=float(when), files=tuple(out), failed=tuple(failed))

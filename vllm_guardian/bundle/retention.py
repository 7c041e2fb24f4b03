"""Bounded evidence on disk: which bundles under ``<state_dir>/incidents/`` to delete.

Reads the folder names, their sizes and each ``incident.json``'s ``status``;
deletes whole bundles, oldest first, until both the count and the byte budget
hold. Age is the bundle's ULID (incident ids are time-sortable; a snapshot's
``snapshot-<ULID>`` sorts by its ULID too). Never deleted: a bundle whose
incident is still open (``status`` other than ``resolved``) and any id in
``protect``. A folder whose name carries no ULID is not ours: neither counted
nor touched.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)

INCIDENT_FILE = "incident.json"
_ULID = re.compile(r"(?:^|-)([0-9A-HJKMNP-TV-Z]{26})$")


@dataclass(frozen=True)
class Bundle:
    id: str
    path: Path
    age_key: str  # the ULID: lexicographic order is time order
    size: int
    open: bool  # its incident is still firing (or remediating): never deleted


def ulid_of(name: str) -> str | None:
    """The ULID a bundle name carries (``01J…`` or ``snapshot-01J…``), else None."""
    m = _ULID.search(name)
    return m.group(1) if m else None


def tree_size(path: Path) -> int:
    """Bytes of every regular file under ``path`` (links not followed); vanished files count 0."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            total += st.st_size
    return total


def is_open(bundle_dir: Path) -> bool:
    """True when the bundle's ``incident.json`` says the incident is not resolved.
    No file (a snapshot) or an unreadable one: not open."""
    try:
        with open(bundle_dir / INCIDENT_FILE, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("status", "resolved") != "resolved"


def scan(incidents_dir: Path) -> list[Bundle]:
    """Our bundles under ``incidents_dir``, oldest first."""
    out = []
    try:
        entries = list(Path(incidents_dir).iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        key = ulid_of(entry.name)
        if key is None or entry.is_symlink() or not entry.is_dir():
            continue
        out.append(Bundle(entry.name, entry, key, tree_size(entry), is_open(entry)))
    out.sort(key=lambda b: (b.age_key, b.id))
    return out


def plan(bundles: list[Bundle], max_bundles: int, max_bytes: int, protect: Iterable[str] = ()) -> list[Bundle]:
    """Which bundles (oldest first) to delete so that count ≤ ``max_bundles`` and bytes ≤
    ``max_bytes``, skipping open and protected ones. Pure."""
    keep = set(protect)
    count = len(bundles)
    size = sum(b.size for b in bundles)
    doomed = []
    for b in bundles:
        if count <= max_bundles and size <= max_bytes:
            break
        if b.open or b.id in keep:
            continue
        doomed.append(b)
        count -= 1
        size -= b.size
    return doomed


def apply_retention(incidents_dir: Path, max_bundles: int, max_bytes: int, protect: Iterable[str] = ()) -> list[str]:
    """Delete the oldest closed bundles beyond the limits; the ids removed, oldest first.
    A bundle that cannot be deleted is logged and skipped (another pass may get it)."""
    removed = []
    for b in plan(scan(Path(incidents_dir)), max_bundles, max_bytes, protect):
        try:
            shutil.rmtree(b.path)
        except FileNotFoundError:
            pass  # a concurrent pass got it first
        except OSError as e:
            log.warning("evidence retention: cannot delete %s: %s", b.path, e)
            continue
        removed.append(b.id)
    return removed

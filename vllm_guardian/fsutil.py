"""Durable file writes: the one ``atomic_write``.

A reader sees the old file or the new one, never a part: the data goes to a temporary file in
the same folder, which is fsync'd, renamed over the target (``os.replace``), and the folder is
fsync'd so the rename itself survives a crash. ``fsync=False`` skips both fsyncs (tests on slow
disks); the rename stays atomic.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

DEFAULT_MODE = 0o640


def atomic_write(
    path: str | os.PathLike[str], data: bytes | str, *, mode: int = DEFAULT_MODE, fsync: bool = True
) -> None:
    path = Path(path)
    raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a folder's entries (a new or renamed file) durable; best effort where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

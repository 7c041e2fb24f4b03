"""Another user on this host, for the hostile cases of files a server's user controls.

``nobody`` (uid/gid 65534 on Debian and its kin) runs the commands: a real ``ln -s`` by a real
unprivileged process (``subprocess`` drops to it, as the guardian's own launch does), in a
directory that user owns. ``world_dir`` is a directory under /tmp that user can reach (pytest's
``tmp_path`` sits in a 0700 directory of root's); ``root_only`` is a file only root may read.
Dropping to another user needs root: the tests that use these skip without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NOBODY = 65534
SECRET = "root:$6$guardian-test-secret$never-in-a-bundle:19000:0:99999:7:::\n"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


def as_nobody(*argv: str) -> None:
    """Run ``argv`` as nobody (uid and gid 65534, no supplementary groups); fails the test when it fails."""
    subprocess.run(list(argv), user=NOBODY, group=NOBODY, extra_groups=[], check=True, timeout=30)


@contextmanager
def world_dir() -> Iterator[Path]:
    """A fresh directory under /tmp that every user can traverse (mode 0755, owned by root)."""
    d = Path(tempfile.mkdtemp(prefix="guardian-users-", dir="/tmp"))
    try:
        d.chmod(0o755)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def users_dir(parent: Path, name: str = "vllm", mode: int = 0o755) -> Path:
    """A directory ``parent/name`` owned by nobody: what a server's user controls."""
    d = parent / name
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    d.chmod(mode)
    return d


def root_only(parent: Path, name: str = "shadow", text: str = SECRET) -> Path:
    """A file of root's, mode 0600, holding ``text``."""
    f = parent / name
    f.write_text(text)
    f.chmod(0o600)
    return f


def snapshot(path: Path) -> tuple[bytes, int, int]:
    """What must not change: the bytes, size and mtime of a file."""
    st = path.stat()
    return path.read_bytes(), st.st_size, st.st_mtime_ns

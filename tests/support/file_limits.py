"""A ceiling on the size of every file this process writes (RLIMIT_FSIZE, SIGXFSZ ignored): writes
past it fail with EFBIG, as on a full disk, without needing root or a small mount."""

from __future__ import annotations

import resource
import signal
from contextlib import contextmanager


@contextmanager
def file_size_limit(limit: int):
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)

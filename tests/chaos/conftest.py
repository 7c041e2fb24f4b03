"""The chaos tier: real processes, real Redis, real mounts, real signals. Some scenarios need
root (mounting a small tmpfs, forcing a pid to be reused through ns_last_pid); they skip with
that reason otherwise. Run with ``make chaos``."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for folder in (os.path.join(HERE, "..", "live"), os.path.join(HERE, "..", "reliability")):
    folder = os.path.abspath(folder)
    if folder not in sys.path:
        sys.path.insert(0, folder)

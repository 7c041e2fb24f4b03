"""Helpers the chaos scenarios share: the root-only skip marker, a watcher of readiness and status."""

from __future__ import annotations

import os

import pytest

from tests.support.watcher import Watcher  # the one watcher of readiness and status (tests/support)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs / writes ns_last_pid")

__all__ = ["Watcher", "needs_root"]

"""Helpers the chaos scenarios share: the root-only skip marker."""

from __future__ import annotations

import os

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs / writes ns_last_pid")

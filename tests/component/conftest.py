"""Fixtures of the component tier that more than one module uses."""

from __future__ import annotations

import pytest

from tests.support.spinning_programs import start_lru_program


@pytest.fixture
def lru_program(tmp_path):
    """A real process spinning in the LRU eviction loop of vLLM #43941 (killed after the test)."""
    proc = start_lru_program(tmp_path)
    yield proc
    proc.kill()
    proc.wait()

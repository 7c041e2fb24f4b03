"""atomic_write: a reader sees the old content or the new one, and no temporary file is left."""

import os
import stat

import pytest

from vllm_guardian.fsutil import atomic_write


def test_the_new_content_replaces_the_old_with_the_mode_asked_for(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    atomic_write(path, '{"new": true}', mode=0o600)
    assert path.read_text() == '{"new": true}'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, b"new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["state.json"]

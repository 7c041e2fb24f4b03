"""Fault 4: a write the disk cuts short (ENOSPC, EFBIG mid-line) never leaves a torn record.

The file size limit of the process (RLIMIT_FSIZE) makes the kernel cut a write short at a
chosen offset, exactly like a full filesystem does: the first ``write`` returns fewer bytes
than asked, the next fails. The spool must raise, keep its file made of whole lines, and
keep counting only what is really on disk.
"""

from __future__ import annotations

import errno
import json

import pytest

from vllm_guardian.sinks.spool import FILE_NAME, Spool
from tests.support.file_limits import file_size_limit


def ev(n: int, pad: str = "") -> dict:
    return {"id": f"E{n:04d}", "n": n, "pad": pad}


def test_a_write_cut_short_raises_and_leaves_only_whole_lines(tmp_path):
    s = Spool(tmp_path / "spool", max_events=100, max_bytes=1 << 20)
    s.append(ev(1))
    size = (tmp_path / "spool" / FILE_NAME).stat().st_size
    with file_size_limit(size + 10), pytest.raises(OSError) as info:
        s.append(ev(2, pad="x" * 200))
    assert info.value.errno in (errno.EFBIG, errno.ENOSPC)
    raw = (tmp_path / "spool" / FILE_NAME).read_bytes()
    assert raw.endswith(b"\n")
    assert [json.loads(line)["id"] for line in raw.splitlines()] == ["E0001"]
    assert len(s) == 1


def test_the_next_event_after_a_short_write_is_not_glued_to_a_torn_one(tmp_path):
    s = Spool(tmp_path / "spool", max_events=100, max_bytes=1 << 20)
    s.append(ev(1))
    size = (tmp_path / "spool" / FILE_NAME).stat().st_size
    with file_size_limit(size + 10), pytest.raises(OSError):
        s.append(ev(2, pad="x" * 200))
    s.append(ev(3))
    assert [e["id"] for e in s.head(10)] == ["E0001", "E0003"]
    assert len(s) == 2
    reopened = Spool(tmp_path / "spool", max_events=100, max_bytes=1 << 20)
    assert [e["id"] for e in reopened.head(10)] == ["E0001", "E0003"]


def test_a_torn_tail_left_by_a_crash_is_cut_before_the_next_append(tmp_path):
    s = Spool(tmp_path / "spool", max_events=100, max_bytes=1 << 20)
    s.append(ev(1))
    with open(tmp_path / "spool" / FILE_NAME, "ab") as f:
        f.write(b'{"id":"E0002","n":')  # a crash mid-line, behind the spool's back
    s.append(ev(3))
    assert [e["id"] for e in s.head(10)] == ["E0001", "E0003"]

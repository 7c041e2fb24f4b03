"""The alert spool on a real filesystem: durable, ordered, bounded, crash-tolerant."""

from __future__ import annotations

import json
import logging
import stat

import pytest

from vllm_guardian.sinks.spool import FILE_NAME, Spool, encode_event


def ev(n: int, pad: str = "") -> dict:
    return {"id": f"E{n:04d}", "n": n, "pad": pad}


def spool(tmp_path, max_events: int = 100, max_bytes: int = 1 << 20) -> Spool:
    return Spool(tmp_path / "spool", max_events=max_events, max_bytes=max_bytes)


def ids(events) -> list[str]:
    return [e["id"] for e in events]


def file_ids(tmp_path) -> list[str]:
    text = (tmp_path / "spool" / FILE_NAME).read_text()
    return [json.loads(line)["id"] for line in text.splitlines()]


def test_events_come_back_oldest_first(tmp_path):
    s = spool(tmp_path)
    for i in range(5):
        s.append(ev(i))
    assert ids(s.head(3)) == ["E0000", "E0001", "E0002"]
    assert len(s) == 5


def test_each_event_is_one_json_line_in_the_file(tmp_path):
    s = spool(tmp_path)
    s.append(ev(1))
    s.append(ev(2))
    assert file_ids(tmp_path) == ["E0001", "E0002"]


def test_the_spool_survives_a_restart(tmp_path):
    s = spool(tmp_path)
    for i in range(3):
        s.append(ev(i))
    s.close()
    again = spool(tmp_path)
    assert ids(again.head(10)) == ["E0000", "E0001", "E0002"]
    assert len(again) == 3


def test_removed_ids_leave_the_file(tmp_path):
    s = spool(tmp_path)
    for i in range(4):
        s.append(ev(i))
    assert s.remove(["E0000", "E0002"]) == 2
    assert file_ids(tmp_path) == ["E0001", "E0003"]
    assert len(s) == 2


def test_removing_unknown_ids_changes_nothing(tmp_path):
    s = spool(tmp_path)
    s.append(ev(1))
    assert s.remove(["nope"]) == 0
    assert s.remove([]) == 0
    assert file_ids(tmp_path) == ["E0001"]


def test_the_spool_file_is_not_world_readable(tmp_path):
    s = spool(tmp_path)
    s.append(ev(1))
    s.remove(["E0001"])
    s.append(ev(2))
    assert stat.S_IMODE((tmp_path / "spool" / FILE_NAME).stat().st_mode) == 0o640


@pytest.mark.parametrize("event", [{}, {"id": ""}, {"id": 7}, {"n": 1}])
def test_an_event_without_a_string_id_is_refused(tmp_path, event):
    with pytest.raises(ValueError):
        spool(tmp_path).append(event)


# ---------------------------------------------------------------- bounds
def test_a_full_spool_keeps_the_newest_events_and_counts_the_dropped(tmp_path):
    s = spool(tmp_path, max_events=3)
    dropped = [s.append(ev(i)) for i in range(5)]
    assert dropped == [0, 0, 0, 1, 1]
    assert ids(s.head(10)) == ["E0002", "E0003", "E0004"]
    assert s.dropped_total == 2


def test_the_byte_bound_drops_the_oldest_too(tmp_path):
    line = len(encode_event(ev(0, "x" * 100)))
    s = spool(tmp_path, max_bytes=2 * line)
    for i in range(4):
        s.append(ev(i, "x" * 100))
    assert ids(s.head(10)) == ["E0002", "E0003"]
    assert s.dropped_total == 2
    assert s.size_bytes <= 2 * line


def test_an_event_larger_than_the_whole_spool_is_dropped_itself(tmp_path):
    s = spool(tmp_path, max_bytes=64)
    s.append(ev(0))
    s.append(ev(1, "x" * 500))
    assert ids(s.head(10)) == []
    assert s.dropped_total == 2


def test_reopening_with_smaller_bounds_drops_the_oldest(tmp_path):
    s = spool(tmp_path)
    for i in range(5):
        s.append(ev(i))
    s.close()
    small = spool(tmp_path, max_events=2)
    assert ids(small.head(10)) == ["E0003", "E0004"]
    assert small.dropped_total == 3


def test_drops_are_logged_once_per_episode(tmp_path, caplog):
    s = spool(tmp_path, max_events=2)
    with caplog.at_level(logging.WARNING, logger="vllm_guardian.sinks.spool"):
        for i in range(6):
            s.append(ev(i))
        assert sum("spool full" in r.getMessage() for r in caplog.records) == 1
        s.remove(["E0004"])
        assert sum("room again" in r.getMessage() for r in caplog.records) == 1
        s.append(ev(10))
        s.append(ev(11))
    assert sum("spool full" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("bounds", [{"max_events": 0, "max_bytes": 10}, {"max_events": 10, "max_bytes": 0}])
def test_bounds_must_be_positive(tmp_path, bounds):
    with pytest.raises(ValueError):
        Spool(tmp_path / "spool", **bounds)


# ---------------------------------------------------------------- crashes
def test_a_line_torn_by_a_crash_is_dropped_and_the_file_repaired(tmp_path):
    s = spool(tmp_path)
    s.append(ev(1))
    s.close()
    with open(tmp_path / "spool" / FILE_NAME, "ab") as f:
        f.write(b'{"id":"E0002","n"')  # the crash hit mid-write
    again = spool(tmp_path)
    again.append(ev(3))
    assert ids(again.head(10)) == ["E0001", "E0003"]
    assert file_ids(tmp_path) == ["E0001", "E0003"]


@pytest.mark.parametrize("garbage", [b"not json\n", b"[1,2]\n", b'{"no_id":1}\n', b"\xff\xfe\n"])
def test_unreadable_lines_are_skipped(tmp_path, garbage):
    s = spool(tmp_path)
    s.append(ev(1))
    with open(tmp_path / "spool" / FILE_NAME, "ab") as f:
        f.write(garbage)
    s.append(ev(2))
    assert ids(s.head(10)) == ["E0001", "E0002"]
    s.remove(["E0001"])
    assert file_ids(tmp_path) == ["E0002"]


def test_two_spools_on_one_folder_never_lose_each_others_events(tmp_path):
    a = spool(tmp_path)
    b = spool(tmp_path)
    a.append(ev(1))
    b.append(ev(2))
    a.remove(["E0001"])
    assert ids(b.head(10)) == ["E0002"]
    assert file_ids(tmp_path) == ["E0002"]


def test_a_closed_spool_refuses_work(tmp_path):
    s = spool(tmp_path)
    s.close()
    with pytest.raises(ValueError):
        s.append(ev(1))

"""Evidence retention: oldest closed bundles go first, by count and by bytes; open incidents stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.bundle.retention import apply_retention, is_open, scan, ulid_of
from vllm_guardian.incidents.ids import new_incident_id


def ulid(n: int) -> str:
    """The n-th id in time order (ids made one second apart)."""
    return new_incident_id(1_700_000_000.0 + n, rand=lambda k: bytes(k))


def bundle(root: Path, name: str, status: str | None = "resolved", size: int = 100) -> str:
    d = root / name
    d.mkdir(parents=True)
    if status is not None:
        (d / "incident.json").write_text(f'{{"id": "{name}", "status": "{status}"}}')
    (d / "proc").mkdir()
    (d / "proc" / "blob").write_bytes(b"x" * size)
    return name


def left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_count_limit_removes_the_oldest_by_id_not_by_mtime(tmp_path):
    names = [bundle(tmp_path, ulid(n)) for n in (3, 1, 4, 2, 5)]  # created out of time order
    removed = apply_retention(tmp_path, max_bundles=3, max_bytes=10**9)
    assert removed == [ulid(1), ulid(2)]
    assert left(tmp_path) == sorted(set(names) - set(removed))


def test_byte_limit_removes_the_oldest_until_it_fits(tmp_path):
    for n in range(4):
        bundle(tmp_path, ulid(n), size=1000)
    removed = apply_retention(tmp_path, max_bundles=100, max_bytes=2500)
    assert removed == [ulid(0), ulid(1)]


@pytest.mark.parametrize("status", ["firing", "remediating"])
def test_an_open_incident_is_never_deleted_even_when_oldest(tmp_path, status):
    bundle(tmp_path, ulid(0), status=status)
    for n in (1, 2, 3):
        bundle(tmp_path, ulid(n))
    assert apply_retention(tmp_path, max_bundles=2, max_bytes=10**9) == [ulid(1), ulid(2)]
    assert ulid(0) in left(tmp_path)


def test_when_everything_is_open_nothing_is_deleted(tmp_path):
    for n in range(3):
        bundle(tmp_path, ulid(n), status="firing")
    assert apply_retention(tmp_path, max_bundles=1, max_bytes=1) == []
    assert len(left(tmp_path)) == 3


def test_protected_ids_are_kept(tmp_path):
    for n in range(3):
        bundle(tmp_path, ulid(n))
    assert apply_retention(tmp_path, max_bundles=2, max_bytes=10**9, protect=[ulid(0)]) == [ulid(1)]


def test_snapshots_are_aged_by_their_ulid_among_incidents(tmp_path):
    bundle(tmp_path, f"snapshot-{ulid(1)}", status=None)
    bundle(tmp_path, ulid(0))
    bundle(tmp_path, ulid(2))
    assert apply_retention(tmp_path, max_bundles=1, max_bytes=10**9) == [ulid(0), f"snapshot-{ulid(1)}"]


def test_folders_that_are_not_bundles_are_neither_counted_nor_touched(tmp_path):
    (tmp_path / "spool").mkdir()
    (tmp_path / "notes.txt").write_text("x" * 10_000)
    bundle(tmp_path, ulid(0))
    bundle(tmp_path, ulid(1))
    assert apply_retention(tmp_path, max_bundles=2, max_bytes=1000) == []
    assert {"spool", "notes.txt"} <= set(left(tmp_path))


def test_within_limits_nothing_happens(tmp_path):
    bundle(tmp_path, ulid(0))
    assert apply_retention(tmp_path, max_bundles=1, max_bytes=10**9) == []


def test_a_missing_incidents_folder_is_nothing_to_do(tmp_path):
    assert apply_retention(tmp_path / "absent", max_bundles=1, max_bytes=1) == []


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"status": "firing"}', True),
        ('{"status": "resolved"}', False),
        ("{not json", False),  # corrupt: not kept forever
        (None, False),  # a snapshot: no incident.json
    ],
)
def test_is_open(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "incident.json").write_text(content)
    assert is_open(tmp_path) is expected


def test_scan_measures_every_file_of_a_bundle(tmp_path):
    bundle(tmp_path, ulid(0), size=300)
    (b,) = scan(tmp_path)
    assert b.size == 300 + len((tmp_path / ulid(0) / "incident.json").read_bytes())


@pytest.mark.parametrize(
    "name, expected",
    [
        ("01HZX3Q0N7V4Y8K2M6P9R5T1W3", "01HZX3Q0N7V4Y8K2M6P9R5T1W3"),
        ("snapshot-01HZX3Q0N7V4Y8K2M6P9R5T1W3", "01HZX3Q0N7V4Y8K2M6P9R5T1W3"),
        ("01HZX3Q0N7V4Y8K2M6P9R5T1W", None),  # too short
        ("01HZX3Q0N7V4Y8K2M6P9R5T1WU", None),  # U is not Crockford base32
        ("spool", None),
    ],
)
def test_ulid_of(name, expected):
    assert ulid_of(name) == expected

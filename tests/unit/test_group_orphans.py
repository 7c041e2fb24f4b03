"""Orphans: VLLM:: processes with no live API server above them, holding memory; stoppable only when proven ours."""

from __future__ import annotations

import pytest

from vllm_guardian.groups.orphans import SUPERVISED, TITLE_ONLY, Proc, find_orphans

GB = 1 << 30
INIT = Proc(1, 0, 1, "systemd", 0)
SERVER = Proc(100, 1, 500, "python3", 2 * GB, api_server=True)


def engine(pid=101, ppid=100, start=600, title="VLLM::EngineCore", rss=3 * GB, accel=0) -> Proc:
    return Proc(pid, ppid, start, title, rss, accel_bytes=accel)


@pytest.mark.parametrize(
    ("procs", "supervised", "found"),
    [
        ([INIT, engine(ppid=1)], {101: 600}, [(101, SUPERVISED, True)]),
        ([INIT, engine(ppid=1)], {}, [(101, TITLE_ONLY, False)]),
        ([INIT, engine(ppid=1)], {101: 599}, [(101, TITLE_ONLY, False)]),
        ([INIT, engine(ppid=1, rss=1 << 20, accel=10 * GB)], {101: 600}, [(101, SUPERVISED, True)]),
        (
            [INIT, engine(ppid=1), engine(pid=102, ppid=101, title="VLLM::Worker_TP0")],
            {101: 600, 102: 600},
            [(101, SUPERVISED, True), (102, SUPERVISED, True)],
        ),  # fmt: skip
        ([INIT, engine(ppid=777)], {101: 600}, [(101, SUPERVISED, True)]),
    ],
    ids=[
        "engine-left-by-a-killed-server",
        "title-only-is-reported-not-stoppable",
        "reused-pid-is-not-proven",
        "holds-accelerator-memory",
        "engine-and-its-worker",
        "parent-not-in-table",
    ],  # fmt: skip
)
def test_vllm_processes_without_a_live_server_are_orphans(procs, supervised, found):
    got = find_orphans(procs, supervised=supervised, min_rss=GB)
    assert [(o.pid, o.why, o.provable) for o in got] == found


@pytest.mark.parametrize(
    "procs",
    [
        [INIT, SERVER, engine()],
        [INIT, SERVER, engine(), engine(pid=102, ppid=101, title="VLLM::Worker_TP0")],
        [INIT, engine(ppid=1, rss=1 << 20)],
        [INIT, Proc(101, 1, 600, "python3", 3 * GB)],
    ],
    ids=["engine-under-live-server", "worker-under-live-server", "small-and-no-accelerator-memory", "not-vllm"],
)
def test_no_orphan_where_the_server_lives_or_nothing_is_held(procs):
    assert find_orphans(procs, supervised={101: 600, 102: 600}, min_rss=GB) == ()

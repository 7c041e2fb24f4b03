"""Evidence bundles against a fake /proc and a scripted py-spy: what gets written, and what happens
when py-spy is missing, refused, slow, or the process is gone."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.evidence import (
    EvidenceCollector,
    EvidenceContext,
    EvidenceResult,
    choose_hottest,
    read_summary,
    series_windows,
)
from vllm_guardian.bundle.pid_target import target_for_pid
from vllm_guardian.config.schema import EvidenceConfig, RetentionConfig
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.model import Incident, Kind, ProcessInfo, Role, Sample, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.testing.fake_runner import FakeRunner, result
from tests.support.evidence_world import API_ARGV, SECRET, World, dump_json, records_write

STOPPED = "Error: Failed to get stack traces\n\nStack backtrace:\n   0: anyhow::error::msg\n"
GONE = (
    "Error: Failed to get process executable name. Check that the process is running.\n\n"
    "Caused by:\n    0: No such file or directory (os error 2)\n"
)
DENIED = (
    "Error: Failed to get process executable name. Check that the process is running.\n\n"
    "Caused by:\n    0: Permission denied (os error 13)\n"
)


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def dumps(runner: FakeRunner) -> list[tuple[str, ...]]:
    return [a for a in runner.argvs() if a[1] == "dump"]


def manifest(res) -> dict:
    return json.loads((res.dir / "capture.json").read_text())


# ---------------------------------------------------------------- the bundle
def test_one_dump_per_process_of_the_tree_and_never_subprocesses(world):
    world.capture()
    calls = dumps(world.runner)
    assert sorted(a[3] for a in calls) == ["100", "200", "300"]
    assert not any("--subprocesses" in a or "-s" in a for a in calls)


def test_the_bundle_lives_in_the_incident_folder_with_every_part(world):
    res = world.capture(
        series={m.PROC_CPU: {"p200": [[1.0, 0.99]]}},
        metrics_text="vllm:num_requests_running 1\n",
        accelerators={"devices": [{"index": 0, "memory_used": 1}]},
    )
    assert res.dir == world.store.dir_for(world.incident.id)
    assert {
        "pyspy-100-api_server.json",
        "pyspy-100-api_server.txt",
        "pyspy-200-engine_core.json",
        "pyspy-200-engine_core.txt",
        "pyspy-300-worker.json",
        "pyspy-300-worker.txt",
        "flame-200.svg",
        "flame-200.speedscope.json",
        "series.json",
        "metrics.txt",
        "accelerators.json",
        "summary.txt",
        "capture.json",
        "proc/200/status",
        "proc/200/stat",
        "proc/200/task/201/syscall",
    } <= set(res.files)
    assert all((res.dir / f).is_file() for f in res.files)
    assert res.complete and res.failures == {}


@pytest.mark.parametrize("name", ["stat", "status", "syscall", "wchan", "stack"])
def test_proc_files_are_copied_verbatim_for_every_thread(world, name):
    res = world.capture()
    for pid, tid in ((100, 100), (100, 101), (200, 200), (200, 201), (300, 300)):
        rel = f"{pid}/task/{tid}/{name}"
        assert (res.dir / "proc" / rel).read_text() == (world.tree.root / rel).read_text()


def test_optional_parts_are_omitted_when_not_given(world):
    res = world.capture()
    assert not {"series.json", "metrics.txt", "accelerators.json"} & set(res.files)


def test_series_json_holds_the_windows_as_given(world):
    series = {m.PROC_CPU: {"p200": [[1.0, 0.99], [2.0, 1.0]]}, m.ITERATIONS: {"": [[1.0, 7.0]]}}
    res = world.capture(series=series)
    assert json.loads((res.dir / "series.json").read_text()) == series


def test_the_text_dump_is_rendered_from_the_same_json_dump(world):
    res = world.capture()
    text = (res.dir / "pyspy-200-engine_core.txt").read_text()
    assert text.startswith("Process 200: VLLM::EngineCore\nMode: blocking\n\n")
    from_text = pyspy.parse_dump_text(text)
    from_json = pyspy.parse_dump_json((res.dir / "pyspy-200-engine_core.json").read_text())

    def shape(threads):
        return [(t.os_thread_id, t.status, [f.label for f in t.frames]) for t in threads]

    assert shape(from_text) == shape(from_json)
    assert [f.name for f in from_text[0].frames] == ["_ghost_key_spin", "_fire", "step"]


def test_the_record_runs_twice_concurrently_on_the_hottest_process_nonblocking(world):
    res = world.capture()
    recs = [a for a in world.runner.argvs() if a[1] == "record"]
    assert sorted(a[a.index("--format") + 1] for a in recs) == ["flamegraph", "speedscope"]
    assert all(
        a[a.index("--pid") + 1] == "200" and "--nonblocking" in a and a[a.index("--duration") + 1] == "2" for a in recs
    )
    assert (res.dir / "flame-200.svg").read_bytes() == b"<svg>flame</svg>"


def test_the_processes_are_released_once_read_and_dumped_while_the_record_still_samples(world):
    """The stop of a restart waits only for what needs the tree alive; py-spy's record, still
    sampling, writes what it saw when the tree dies."""
    order: list[str] = []
    released = threading.Event()
    sampling = threading.Event()

    def record(argv):
        sampling.set()
        assert released.wait(5), "the capture waited for the record before releasing the processes"
        order.append("record finished")
        return records_write()(argv)

    def live_done():
        order.append("released")
        released.set()

    world.runner.answer(("py-spy", "record"), record)
    res = world.capture(on_live_done=live_done)
    assert sampling.is_set() and order == ["released", "record finished", "record finished"]
    assert len(dumps(world.runner)) == 3 and "flame-200.svg" in res.files and res.complete


def test_the_record_starts_before_the_proc_files_are_read(world):
    """Non-blocking samplers run while /proc is read, so they cost the capture no extra time."""
    started = threading.Event()
    at_first_read: list[bool] = []
    opener = world.tree.opener

    def first_read_waits_for_the_record(path: str):
        if "/task/" in path and not at_first_read:  # the first evidence read (identity checks come before)
            at_first_read.append(started.wait(5))
        return opener(path)

    def record(argv):
        started.set()
        return records_write()(argv)

    world.runner.answer(("py-spy", "record"), record)
    collector = EvidenceCollector(
        world.cfg,
        world.store.dir_for,
        world.runner,
        world.tree.procfs(opener=first_read_waits_for_the_record),
        world.clock,
        locate=lambda name: name,
    )
    collector.capture(world.context())
    assert at_first_read == [True]


def test_the_release_is_signalled_even_without_py_spy(tmp_path):
    w = World(tmp_path)
    released: list[bool] = []
    w.collector(locate=lambda name: None).capture(w.context(on_live_done=lambda: released.append(True)))
    assert released == [True]


def test_no_record_when_record_seconds_is_zero(tmp_path):
    w = World(tmp_path, record_seconds=0)
    res = w.capture()
    assert not [a for a in w.runner.argvs() if a[1] == "record"]
    assert not [f for f in res.files if f.startswith("flame-")] and res.complete


def test_the_snapshot_can_override_the_record_seconds(world):
    world.collector().snapshot(world.target, record_seconds=5, hottest_pid=300)
    recs = [a for a in world.runner.argvs() if a[1] == "record"]
    assert {(a[3], a[a.index("--duration") + 1]) for a in recs} == {("300", "5")}


# ---------------------------------------------------------------- the summary
def test_summary_says_what_fired_which_thread_its_frames_and_its_proc_state(world):
    text = read_summary(world.capture().dir)
    assert "busy_loop (critical, firing) on target llama" in text
    assert "EngineCore thread 200 spins at 99% CPU" in text
    assert "cpu_ratio=0.99" in text
    assert 'Thread 200 "MainThread" (active+gil)' in text
    assert "    _ghost_key_spin (200.py:1)\n    _fire (200.py:2)\n    step (200.py:3)" in text
    assert (
        "/proc thread 200: state R, cpu 900 ticks (utime+stime), syscall running, wchan -, "
        "switches 3 voluntary / 4567 involuntary" in text
    )
    assert "flame-200.svg" in text and "complete" in text


def test_summary_of_a_process_without_stack_gives_the_reason(world):
    world.runner.answer(("py-spy", "dump", "--pid", "200"), result(returncode=1, stderr=DENIED))
    text = read_summary(world.capture().dir)
    assert "No Python stack: " in text and "CAP_SYS_PTRACE" in text
    assert "/proc thread 200: state R" in text


def test_read_summary_of_a_folder_without_one_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_summary(tmp_path)


# ---------------------------------------------------------------- failures
def test_a_blocking_failure_is_retried_nonblocking_and_recorded(world):
    world.runner.answer(("py-spy", "dump", "--pid", "200", "--json"), result(returncode=1, stderr=STOPPED))
    world.runner.answer(
        ("py-spy", "dump", "--pid", "200", "--json", "--nonblocking"), result(dump_json(200, ["_ghost_key_spin"]))
    )
    res = world.capture()
    calls = [a for a in dumps(world.runner) if a[3] == "200"]
    assert calls == [
        ("py-spy", "dump", "--pid", "200", "--json"),
        ("py-spy", "dump", "--pid", "200", "--json", "--nonblocking"),
    ]
    doc = manifest(res)
    assert [(s["mode"], s["rc"]) for s in doc["steps"] if s["what"] == "dump" and s["pid"] == 200] == [
        ("blocking", 1),
        ("nonblocking", 0),
    ]
    assert "retried with --nonblocking" in doc["notes"]["pyspy-200-engine_core.json"]
    assert "Mode: nonblocking" in (res.dir / "pyspy-200-engine_core.txt").read_text()
    assert res.complete


def test_native_is_asked_in_blocking_mode_only(tmp_path):
    w = World(tmp_path, native=True)
    w.runner.answer(("py-spy", "dump", "--pid", "200", "--json", "--native"), result(returncode=1, stderr=STOPPED))
    w.runner.answer(("py-spy", "dump", "--pid", "200", "--json", "--nonblocking"), result(dump_json(200, ["f"])))
    w.capture()
    assert [a[4:] for a in dumps(w.runner) if a[3] == "200"] == [("--json", "--native"), ("--json", "--nonblocking")]


def test_locals_are_off_by_default_and_on_when_configured(tmp_path):
    off = World(tmp_path / "a")
    off.capture()
    on = World(tmp_path / "b", locals=True)
    on.capture()
    assert not any("--locals" in a for a in dumps(off.runner))
    assert all("--locals" in a for a in dumps(on.runner))


def test_both_modes_failing_leave_the_reasons_and_no_dump_files(world):
    world.runner.answer(("py-spy", "dump", "--pid", "200"), result(returncode=1, stderr=STOPPED))
    res = world.capture()
    reason = res.failures["pyspy-200-engine_core.json"]
    assert reason.startswith("blocking dump failed: blocking dump failed") and "then: blocking dump failed" in reason
    assert "pyspy-200-engine_core.json" not in res.files and not res.complete


def test_missing_py_spy_still_gives_proc_files_and_a_manifest_with_the_reason(tmp_path):
    w = World(tmp_path)
    res = w.capture(runner=FakeRunner(missing=["py-spy"]))
    assert "proc/200/task/200/syscall" in res.files
    assert (
        "py-spy not found: install py-spy or set evidence.pyspy"
        in manifest(res)["failures"]["pyspy-200-engine_core.json"]
    )
    assert not res.complete


def test_py_spy_not_located_is_said_once_and_never_run(world):
    res = world.collector(locate=lambda name: None).capture(world.context())
    assert world.runner.calls == []
    assert res.failures["py-spy"] == pyspy.MISSING_REASON
    assert "py-spy not found" in read_summary(res.dir)
    assert "proc/100/stat" in res.files


def test_ptrace_refused_names_cap_sys_ptrace_and_is_not_retried(world):
    for pid in (100, 200, 300):
        world.runner.answer(("py-spy", "dump", "--pid", str(pid)), result(returncode=1, stderr=DENIED))
    res = world.capture()
    assert all(
        "CAP_SYS_PTRACE" in res.failures[f"pyspy-{pid}-{role}.json"]
        for pid, role in ((100, "api_server"), (200, "engine_core"), (300, "worker"))
    )
    assert len(dumps(world.runner)) == 3


def test_a_pid_gone_before_capture_gives_a_partial_bundle_without_touching_it(world):
    world.tree.remove(300)
    res = world.capture()
    assert "process gone before capture" in res.failures["proc/300"]
    assert not [a for a in dumps(world.runner) if a[3] == "300"]
    assert "pyspy-200-engine_core.json" in res.files and not res.complete


def test_a_pid_that_vanishes_during_the_dump_is_a_reason_not_an_exception(world):
    world.runner.answer(("py-spy", "dump", "--pid", "300"), result(returncode=1, stderr=GONE))
    res = world.capture()
    assert res.failures["pyspy-300-worker.json"].startswith("process gone: Failed to get process executable name")
    assert len([a for a in dumps(world.runner) if a[3] == "300"]) == 1  # no pointless retry


def test_a_thread_that_exits_mid_read_is_recorded(world):
    world.tree.vanish_on_read(300, "task/300/stat")
    res = world.capture()
    assert res.failures["proc/300/task/300/stat"].startswith("gone: ")


def test_an_unreadable_stack_is_recorded_with_the_capability(world):
    world.tree.deny("200/task/201/stack")
    res = world.capture()
    assert "CAP_SYS_PTRACE" in res.failures["proc/200/task/201/stack"]
    assert "proc/200/task/201/syscall" in res.files


def test_a_reused_pid_is_never_dumped(world):
    world.tree.remove(300)
    world.tree.add_process(300, ppid=1, cmdline=("bash",), starttime=99999)
    res = world.capture()
    assert "now belongs to another process" in res.failures["proc/300"]
    assert not [a for a in dumps(world.runner) if a[3] == "300"]
    assert not (res.dir / "proc" / "300").exists()


def test_unparsable_py_spy_output_is_kept_as_text_with_the_reason(world):
    world.runner.answer(("py-spy", "dump", "--pid", "300"), result("garbage --api-key=abc"))
    res = world.capture()
    assert res.failures["pyspy-300-worker.json"].startswith("unparsable py-spy output")
    assert (res.dir / "pyspy-300-worker.txt").read_text() == "garbage --api-key=<redacted>"


def test_a_py_spy_without_json_is_dumped_in_text_mode(world):
    world.runner.answer(
        ("py-spy", "dump", "--pid", "300", "--json"),
        result(returncode=2, stderr="error: unexpected argument '--json' found\n"),
    )
    world.runner.answer(
        ("py-spy", "dump", "--pid", "300"),
        result('Process 300: VLLM::Worker\n\nThread 300 (idle): "MainThread"\n    recv (c.py:3)\n'),
    )
    res = world.capture()
    assert "pyspy-300-worker.json" not in res.files
    assert "recv (c.py:3)" in (res.dir / "pyspy-300-worker.txt").read_text()
    assert "pyspy-300-worker.json" not in res.failures


def test_a_failed_record_leaves_no_partial_file(world):
    def fail(argv):
        Path(argv[argv.index("--output") + 1]).write_bytes(b"<svg")
        return result(returncode=1, stderr="Error: Failed to write flamegraph: No stack counts found\n")

    world.runner.answer(("py-spy", "record"), fail)
    res = world.capture()
    assert res.failures["flame-200.svg"].startswith("no samples")
    assert not (res.dir / "flame-200.svg").exists()


def test_a_record_that_writes_nothing_is_a_failure(world):
    world.runner.answer(("py-spy", "record"), result("ok"))
    res = world.capture()
    assert res.failures["flame-200.speedscope.json"] == "py-spy record wrote no output"


def test_past_the_overall_deadline_the_capture_returns_with_the_reason(tmp_path):
    w = World(tmp_path, dump_timeout=0.05, record_seconds=0)
    release = threading.Event()

    def hang(argv):
        release.wait(10)
        return result(dump_json(int(argv[3]), ["f"]))

    w.runner.answer(("py-spy", "dump", "--pid", "200"), hang)
    try:
        res = w.collector(slack=0.2).capture(w.context())
    finally:
        release.set()
    assert "overall capture deadline" in res.failures["pyspy-200-engine_core.json"]
    assert "capture.json" in res.files


def test_dumps_run_at_most_four_at_a_time(tmp_path):
    w = World(tmp_path, record_seconds=0)
    extra = []
    for pid in (400, 500, 600):
        key = w.tree.add_process(pid, ppid=200, cmdline=("VLLM::Worker",))
        extra.append(ProcessInfo(key, 200, Role.WORKER, ("VLLM::Worker",)))
    target = Target("llama", w.api, w.target.processes + tuple(extra))
    lock, active, peak = threading.Lock(), [0], [0]

    def slow(argv):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        deadline = time.monotonic() + 2
        while peak[0] < 4 and time.monotonic() < deadline:  # poll: wait until the pool is full
            time.sleep(0.005)
        with lock:
            active[0] -= 1
        return result(dump_json(int(argv[3]), ["f"]))

    for p in target.processes:
        w.runner.answer(("py-spy", "dump", "--pid", str(p.pid)), slow)
    res = w.capture(target=target)
    assert peak[0] == 4 and len(dumps(w.runner)) == 6 and res.complete


@pytest.mark.parametrize("breakage", ["dir", "procfs"])
def test_capture_never_raises(world, breakage):
    if breakage == "dir":
        res = world.capture(bundle_id="../escape")
        assert "no folder" in res.failures["bundle"]
    else:

        def boom(path):
            raise RuntimeError("disk on fire")

        collector = EvidenceCollector(
            world.cfg,
            world.store.dir_for,
            world.runner,
            world.tree.procfs(opener=boom),
            world.clock,
            locate=lambda n: n,
        )
        res = collector.capture(world.context())
        assert res.failures["capture"] == "RuntimeError: disk on fire"
    assert not res.complete


# ---------------------------------------------------------------- what it writes, and how
def test_files_are_0640_and_folders_0750(world):
    res = world.capture()
    for dirpath, _dirnames, filenames in os.walk(res.dir):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o750, dirpath
        for f in filenames:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, f)).st_mode) == 0o640, f


def test_secrets_from_command_lines_are_never_written(world):
    world.runner.answer(
        ("py-spy", "dump", "--pid", "100"),
        result(
            json.dumps(
                [
                    {
                        "pid": 100,
                        "thread_id": 1,
                        "thread_name": "MainThread",
                        "os_thread_id": 100,
                        "active": False,
                        "owns_gil": False,
                        "frames": [],
                        "process_info": {"pid": 100, "command_line": " ".join(API_ARGV), "parent": None},
                    }
                ]
            )
        ),
    )
    res = world.capture(metrics_text=f"# --api-key={SECRET}\n")
    for f in res.files:
        assert SECRET not in (res.dir / f).read_text(errors="replace"), f
    assert manifest(res)["processes"][0]["cmdline"][-2:] == ["--api-key", "<redacted>"]


def test_incident_json_belongs_to_the_store_and_is_left_alone(world):
    path = world.store.save(world.incident)
    before = path.read_bytes()
    res = world.capture()
    assert path.read_bytes() == before and "incident.json" not in res.files


def test_the_manifest_lists_every_file_with_its_size_and_every_call(world):
    res = world.capture()
    doc = manifest(res)
    assert {f["name"]: f["bytes"] for f in doc["files"]} == {
        f: (res.dir / f).stat().st_size for f in res.files if f != "capture.json"
    }
    assert {(s["what"], s["pid"]) for s in doc["steps"]} == {
        ("dump", 100),
        ("dump", 200),
        ("dump", 300),
        ("record", 200),
    }
    assert doc["complete"] is True and doc["hottest_pid"] == 200 and doc["incident"]["kind"] == "busy_loop"


def test_capture_applies_retention_but_keeps_its_own_bundle(tmp_path):
    w = World(tmp_path, retention=RetentionConfig(max_bundles=2, max_bytes=10**9))
    old = []
    for i in range(3):
        bid = new_incident_id(1000.0 + i)
        d = w.store.dir_for(bid)
        d.mkdir(parents=True)
        (d / "incident.json").write_text('{"status": "resolved"}')
        old.append(bid)
    res = w.capture()
    assert res.removed == tuple(old[:2])
    assert res.dir.is_dir() and sorted(p.name for p in res.dir.parent.iterdir()) == sorted([old[2], res.dir.name])


# ---------------------------------------------------------------- snapshots and helpers
def test_a_snapshot_has_a_synthetic_id_and_no_incident(world):
    res = world.collector().snapshot(world.target)
    assert res.dir.name.startswith("snapshot-") and len(res.dir.name) == len("snapshot-") + 26
    assert read_summary(res.dir).startswith(f"Evidence snapshot {res.dir.name} of target llama")
    assert manifest(res)["incident"] is None


def test_target_for_pid_is_the_process_and_all_its_descendants(world):
    world.tree.add_process(999, ppid=1, cmdline=("unrelated",))
    t = target_for_pid(world.tree.procfs(), 100)
    assert [(p.pid, p.role) for p in t.processes] == [
        (100, Role.API_SERVER),
        (200, Role.ENGINE_CORE),
        (300, Role.WORKER),
    ]
    assert t.key == world.api


def test_target_for_a_missing_pid_raises_target_gone(world):
    from vllm_guardian.errors import TargetGone

    with pytest.raises(TargetGone):
        target_for_pid(world.tree.procfs(), 4242)


def _ctx(world, hottest=None, signals=None, series=None):
    inc = None if signals is None else Incident(**{**world.incident.__dict__, "signals": signals})
    return EvidenceContext(inc, world.target, hottest, series or {})


@pytest.mark.parametrize(
    "hottest, signals, series, chosen",
    [
        (300, {"pid": 200}, None, 300),  # the integrator's choice first
        (None, {"pid": 200}, {m.PROC_CPU: {"p300": [[1, 0.9]]}}, 200),  # then the incident's pid
        (4242, {"pid": 4343}, {m.PROC_CPU: {"p100": [[1, 0.2]], "p300": [[1, 0.1], [2, 0.95]]}}, 300),  # CPU
        (None, None, {m.PROC_CPU: {"p9999": [[1, 1.0]]}}, 200),  # not in the tree: the EngineCore
        (None, {}, None, 200),
    ],
)
def test_choose_hottest(world, hottest, signals, series, chosen):
    assert choose_hottest(_ctx(world, hottest, signals, series)) == chosen


def test_series_windows_are_the_targets_series_since_a_time():
    store = SeriesStore()
    store.extend(
        [
            Sample("llama", "p200", m.PROC_CPU, 0.5, 1.0),
            Sample("llama", "p200", m.PROC_CPU, 0.9, 5.0),
            Sample("llama", "", m.ITERATIONS, 7, 5.0),
            Sample("other", "p1", m.PROC_CPU, 1.0, 5.0),
        ]
    )
    assert series_windows(store, "llama", since=2.0) == {
        m.PROC_CPU: {"p200": [[5.0, 0.9]]},
        m.ITERATIONS: {"": [[5.0, 7.0]]},
    }
    assert series_windows(store, "llama", since=9.0) == {}


def test_the_deadline_covers_a_retry_per_dump_round_plus_the_record(world):
    c = world.collector(slack=1.0)
    assert c.deadline(3) == 2 * 5.0 + (2 + 5.0) + 1.0
    assert c.deadline(5, record_seconds=0) == 2 * 2 * 5.0 + 1.0


def test_summary_of_a_dump_without_threads_says_so(world):
    world.runner.answer(("py-spy", "dump", "--pid", "200"), result("[]"))
    assert "No Python stack: py-spy saw no Python thread" in read_summary(world.capture().dir)


# ---------------------------------------------------------------- psutil's per-process details
class RecordedDetails:
    """Stands in for PsutilDetails over the fake tree: answers what it was asked, records the keys."""

    def __init__(self, fail: Exception | None = None):
        self.asked: list[list] = []
        self.fail = fail

    def read(self, keys):
        self.asked.append(list(keys))
        if self.fail is not None:
            raise self.fail
        return {str(k.pid): {"memory": {"uss": 1024 * k.pid}} for k in self.asked[-1]}


def test_process_details_are_written_for_every_live_process_of_the_tree(world):
    details = RecordedDetails()
    res = world.collector(details=details).capture(world.context())
    assert sorted(k.pid for k in details.asked[0]) == [100, 200, 300]
    assert json.loads((res.dir / "processes.json").read_text())["200"] == {"memory": {"uss": 204800}}


def test_a_details_reader_that_breaks_is_recorded_and_the_bundle_goes_on(world):
    res = world.collector(details=RecordedDetails(fail=RuntimeError("psutil broke"))).capture(world.context())
    assert res.failures["processes.json"] == "RuntimeError: psutil broke"
    assert (res.dir / "summary.txt").exists()


# ---------------------------------------------------------------- output_corruption: the answers, not the stacks
CORRUPTION_SIGNALS = {
    "condition": "D",
    "level": "L5",
    "model": "tiny",
    "vllm_version": "0.32.0",
    "evidence": [
        {
            "prompt": "Count on: one, two, three, four, five,",
            "output": " seven nine",
            "tokens": [" seven", " nine"],
            "token_logprobs": [-0.1, -0.2],
            "baseline_answer": " six seven",
            "expected": "baseline ' six seven'",
        }
    ],
    "failing_rounds": [{"age_s": 0.0, "failures": []}],
}


def corruption(world: World, **cfg) -> tuple[World, EvidenceResult]:
    from dataclasses import replace

    if cfg:
        world.cfg = EvidenceConfig(**{**world.cfg.__dict__, **cfg})
    inc = replace(world.incident, kind=Kind.OUTPUT_CORRUPTION, signals=CORRUPTION_SIGNALS)
    return world, world.capture(incident=inc)


def test_output_corruption_gets_the_failing_answers_and_no_stack_dump(world):
    _, res = corruption(world)
    assert world.runner.argvs() == []  # neither dump nor record: the server is not stuck
    gates = json.loads((res.dir / "gates.json").read_text())
    assert gates["model"] == "tiny" and gates["vllm_version"] == "0.32.0"
    (one,) = gates["evidence"]
    assert one["output"] == " seven nine" and one["baseline_answer"] == " six seven" and one["token_logprobs"]
    assert "output_corruption_stacks" in manifest(res)["notes"]["py-spy"]
    assert (res.dir / "proc" / "200").is_dir()  # /proc is still read: cheap, and never pauses the server


def test_output_corruption_stacks_when_the_config_asks(world):
    _, res = corruption(world, output_corruption_stacks=True)
    assert sorted(a[3] for a in dumps(world.runner)) == ["100", "200", "300"]
    assert (res.dir / "gates.json").exists()

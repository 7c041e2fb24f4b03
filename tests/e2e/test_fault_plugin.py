"""The fault plugin's decisions and patching, without vLLM (stand-in classes, a temp trigger dir)."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from tests.e2e.vllm_fault_plugin import guardian_vllm_fault_plugin as fp
from tests.support.wait import poll


@pytest.mark.parametrize(
    "names, expected",
    [
        ([], frozenset()),
        (["busy_loop"], frozenset({"busy_loop"})),
        (["busy_loop.onset", ".busy_loop.tmp", "notes.txt"], frozenset()),
        (["die", "kv_leak", "rss_leak", "stall"], frozenset({"die", "kv_leak", "rss_leak", "stall"})),
    ],
)
def test_read_triggers_keeps_only_known_fault_names(names, expected):
    assert fp.read_triggers(names) == expected


@pytest.mark.parametrize(
    "triggers, expected",
    [
        (set(), None),
        ({"kv_leak", "rss_leak"}, None),
        ({"stall"}, "stall"),
        ({"stall", "busy_loop"}, "busy_loop"),
        ({"stall", "busy_loop", "die"}, "die"),
    ],
)
def test_blocking_fault_priority_is_death_then_busy_loop_then_stall(triggers, expected):
    assert fp.blocking_fault(triggers) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", fp.DEFAULT_RSS_MB_PER_STEP),
        ("16\n", 16),
        ("0", fp.DEFAULT_RSS_MB_PER_STEP),
        ("-3", fp.DEFAULT_RSS_MB_PER_STEP),
        ("lots", fp.DEFAULT_RSS_MB_PER_STEP),
    ],
)
def test_parse_rss_mb(text, expected):
    assert fp.parse_rss_mb(text) == expected


def test_busy_loop_spins_until_the_switch_goes_off():
    answers = iter([True, True, False])
    spins = fp._injected_busy_loop(lambda: next(answers), check_every=0.001)
    assert spins > 3


def test_stall_blocks_until_the_switch_goes_off():
    answers = iter([True, False])
    assert fp._injected_stall(lambda: next(answers), check_every=0.001) == 2


class FakeEngineCore:
    def __init__(self):
        self.steps = 0

    def step(self):
        self.steps += 1
        return {}, True


class FakeKVCacheManager:
    def __init__(self):
        self.freed = []

    def free(self, request):
        self.freed.append(request)


def fresh_classes():
    return (type("EngineCore", (FakeEngineCore,), {}), type("KVCacheManager", (FakeKVCacheManager,), {}))


@pytest.fixture
def fdir(tmp_path):
    return fp.FaultDir(tmp_path)


def test_install_wraps_step_and_free_once(fdir):
    core, kv = fresh_classes()
    inj = fp.FaultInjector(fdir)
    assert fp.install(core, kv, inj) == ["EngineCore.step", "KVCacheManager.free"]
    assert fp.install(core, kv, inj) == []  # vLLM may call a general plugin twice per process
    assert core().step() == ({}, True)


def test_no_trigger_means_a_plain_step_and_a_real_free(fdir):
    core, kv = fresh_classes()
    fp.install(core, kv, fp.FaultInjector(fdir))
    engine, manager = core(), kv()
    engine.step()
    manager.free("req-1")
    assert engine.steps == 1 and manager.freed == ["req-1"]
    assert list(fdir.path.iterdir()) == []


def test_die_exits_with_the_code_and_marks_the_onset(fdir):
    exits: list[int] = []
    inj = fp.FaultInjector(fdir, exit=exits.append, wall=lambda: 123.5, pid=lambda: 4242)
    (fdir.path / "die").write_text("")
    assert inj.before_step() == "die"
    assert exits == [fp.DIE_EXIT_CODE]
    assert json.loads((fdir.path / "die.onset").read_text()) == {"fault": "die", "t": 123.5, "pid": 4242}


def test_onset_is_written_once_per_trigger(fdir):
    assert fdir.mark_onset("stall", 1.0, 1) is True
    assert fdir.mark_onset("stall", 2.0, 1) is False
    assert json.loads((fdir.path / "stall.onset").read_text())["t"] == 1.0


@pytest.mark.parametrize("fault", ["busy_loop", "stall"])
def test_blocking_fault_holds_the_step_until_the_trigger_is_removed(fdir, fault):
    core, kv = fresh_classes()
    fp.install(core, kv, fp.FaultInjector(fdir, busy_check_every=0.01, stall_check_every=0.01))
    engine = core()
    (fdir.path / fault).write_text("")
    t = threading.Thread(target=engine.step, daemon=True)
    t.start()
    assert poll(lambda: (fdir.path / f"{fault}.onset").exists(), 10, every=0.01)
    assert engine.steps == 0 and t.is_alive()
    (fdir.path / fault).unlink()
    t.join(10)
    assert not t.is_alive() and engine.steps == 1


def test_kv_leak_skips_free_while_on(fdir):
    core, kv = fresh_classes()
    inj = fp.FaultInjector(fdir)
    fp.install(core, kv, inj)
    manager = kv()
    (fdir.path / "kv_leak").write_text("")
    manager.free("leaked")
    (fdir.path / "kv_leak").unlink()
    manager.free("freed")
    assert manager.freed == ["freed"] and inj.leaked_frees == 1
    assert (fdir.path / "kv_leak.onset").exists()


def test_rss_leak_keeps_ballast_per_step_and_drops_it_when_cleared(fdir):
    inj = fp.FaultInjector(fdir)
    (fdir.path / "rss_leak").write_text("1")
    inj.before_step()
    inj.before_step()
    assert sum(len(b) for b in inj.ballast) == 2 << 20
    (fdir.path / "rss_leak").unlink()
    inj.before_step()
    assert inj.ballast == []


def test_register_patches_nothing_without_the_env(monkeypatch):
    monkeypatch.delenv(fp.ENV_DIR, raising=False)
    fp.register()  # returns before importing vllm
    assert "vllm" not in sys.modules


class FakeScheduler:
    def __init__(self):
        self.updates = 0

    def schedule(self):
        self._update_after_schedule("output")
        return "output"

    def _update_after_schedule(self, output):
        self.updates += 1


def test_sched_assert_raises_an_assertion_error_inside_the_schedulers_path(fdir):
    core, kv = fresh_classes()
    sched = type("Scheduler", (FakeScheduler,), {})
    inj = fp.FaultInjector(fdir, wall=lambda: 9.0, pid=lambda: 77)
    assert fp.install(core, kv, inj, sched)[-1] == "Scheduler._update_after_schedule"
    assert fp.install(core, kv, inj, sched) == []
    s = sched()
    assert s.schedule() == "output" and s.updates == 1  # no trigger: the real hook runs
    (fdir.path / "sched_assert").write_text("")
    with pytest.raises(AssertionError, match="preempted request rescheduled") as e:
        s.schedule()
    assert "schedule" in [f.name for f in e.traceback]  # raised through the scheduler's own frame
    assert json.loads((fdir.path / "sched_assert.onset").read_text()) == {"fault": "sched_assert", "t": 9.0, "pid": 77}
    assert "sched_assert" in fp.read_triggers(["sched_assert"])
    fp.register()  # returns before importing vllm, which this venv does not have


# ---------------------------------------------------------------- one data-parallel rank
@pytest.mark.parametrize(
    "text, expected", [("", None), ("dp_rank=1", 1), ("dp_rank = 0\n", 0), ("rank 1", None), ("dp_rank=x", None)]
)
def test_a_blocking_trigger_names_its_rank_as_dp_rank_k(text, expected):
    assert fp.parse_dp_rank(text) == expected


@pytest.mark.parametrize(
    "title, expected",
    [("VLLM::EngineCore_DP1", 1), ("VLLM::EngineCore_DP0", 0), ("VLLM::EngineCore", None), ("python", None)],
)
def test_an_engine_knows_its_rank_from_the_title_vllm_gave_it(title, expected):
    assert fp.rank_of_title(title) == expected


@pytest.mark.parametrize(
    "content, my_rank, fires",
    [
        ("dp_rank=1", 1, True),
        ("dp_rank=1", 0, False),  # the other rank goes on serving
        ("dp_rank=1", None, False),  # an engine that is no rank of a data-parallel server
        ("", 0, True),  # no rank named: whichever engine steps first
    ],
)
def test_a_fault_for_one_rank_starts_only_in_that_ranks_engine(fdir, content, my_rank, fires):
    exits: list[int] = []
    inj = fp.FaultInjector(fdir, exit=exits.append, rank=lambda: my_rank)
    (fdir.path / "die").write_text(content)
    assert (inj.before_step() == "die") is fires
    assert (exits == [fp.DIE_EXIT_CODE]) is fires
    assert (fdir.path / "die.onset").exists() is fires

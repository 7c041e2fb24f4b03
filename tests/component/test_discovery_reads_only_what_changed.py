"""A discovery pass reads the stat of new processes only: one seen by the last pass is taken as it
was, unless its parent is gone, it is in a target's tree or an orphan (what the loop acts on:
read every pass), or it was last read STAT_REFRESH_S ago (every process, in turn). What a pass
finds is the same as when it reads everything."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import DiscoveryResult, discover
from vllm_guardian.discovery.snapshot import STAT_REFRESH_S, DiscoveryCache
from vllm_guardian.discovery.targets import TargetsStage
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.testing.fake_proc import FakeProcTree

API = ("/opt/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8000")
SLEEPERS = range(300, 340)


@pytest.fixture
def tree(tmp_path):
    t = FakeProcTree(tmp_path / "proc")
    t.add_process(1, 0, ("/sbin/init",))
    for pid in SLEEPERS:
        t.add_process(pid, 1, ("sleep", "1000"))
    t.add_process(100, 1, API)
    t.add_process(101, 100, ("VLLM::EngineCore",))
    return t


class Reads:
    """The pids whose stat a pass read."""

    def __init__(self, tree: FakeProcTree) -> None:
        self.tree = tree
        self.stats: list[int] = []

    def opener(self, path: str) -> bytes:
        parts = path.split("/")
        if parts[-1] == "stat" and parts[-2].isdigit():
            self.stats.append(int(parts[-2]))
        return self.tree.opener(path)

    def pass_at(self, cache: DiscoveryCache, now: float, cfg=None) -> tuple[DiscoveryCache, DiscoveryResult]:
        self.stats.clear()
        mine = cache.for_pass(now, frozenset())
        return mine, discover(self.tree.procfs(opener=self.opener), cfg or parse_config({}), cache=mine)


def test_a_second_pass_reads_the_stat_of_new_processes_only(tree):
    reads = Reads(tree)
    cache, _ = reads.pass_at(DiscoveryCache(), 0.0)
    assert set(reads.stats) >= set(SLEEPERS)
    tree.add_process(400, 1, ("sleep", "1"))
    cache, result = reads.pass_at(cache, 5.0)
    assert reads.stats == [400]
    assert [t.name for t in result.targets] == ["vllm-8000"]  # found as before, from what was read before


def test_every_process_is_read_again_once_its_reading_is_refresh_old(tree):
    reads = Reads(tree)
    cache, _ = reads.pass_at(DiscoveryCache(), 0.0)
    cache, _ = reads.pass_at(cache, STAT_REFRESH_S - 1)
    assert reads.stats == []
    cache, _ = reads.pass_at(cache, STAT_REFRESH_S)
    assert set(reads.stats) >= set(SLEEPERS)


def test_a_process_whose_parent_is_gone_is_read_again_and_found_under_its_new_parent(tree):
    tree.add_process(500, 1, ("bash",))
    tree.add_process(501, 500, API[:-1] + ("8001",))
    reads = Reads(tree)
    cache, first = reads.pass_at(DiscoveryCache(), 0.0)
    tree.remove(500)
    tree.set_process(501, ppid=1)  # re-parented to init
    cache, second = reads.pass_at(cache, 5.0)
    assert 501 in reads.stats
    (t,) = [t for t in second.targets if t.name == "vllm-8001"]
    assert t.processes[0].ppid == 1


def test_a_watched_process_is_read_every_pass_and_its_exit_seen_by_the_next(tree, tmp_path):
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text("100\n")
    pid_file.chmod(0o644)
    cfg = parse_config({"autodiscover": False, "targets": [{"name": "llm", "match": {"pid_file": str(pid_file)}}]})
    reads = Reads(tree)
    cache, first = reads.pass_at(DiscoveryCache(), 0.0, cfg)
    assert [t.name for t in first.targets] == ["llm"]
    cache.watched = frozenset({100, 101})
    tree.zombie(100)
    cache, second = reads.pass_at(cache, 5.0, cfg)
    assert sorted(reads.stats) == [100, 101]
    assert second.targets == () and "not running" in second.unmatched[0][1]


def test_the_targets_stage_watches_its_targets_trees_and_orphans(tree):
    tree.add_process(200, 1, ("VLLM::EngineCore",))  # an orphan: its API server is gone
    cfg = parse_config({})
    stage = TargetsStage(
        cfg, tree.procfs(), Tracker(cfg.discovery.forget_after), SeriesStore(), logging.getLogger("test")
    )
    stage.step(0.0)
    assert stage.worker.wait(10)
    stage.step(0.1)
    assert stage.cache.watched == {100, 101, 200}

"""Discovery matches sockets by the address and family a target's URL names, as the kernel picks
who answers there (``discovery.serving``), on a fake /proc: the branches the live tests
(tests/live/test_socket_squatters_live.py, real sockets) do not reach cheaply. The ``v6only`` seam
stands in for the kernel's sock_diag answer."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import DiscoveryResult, discover
from vllm_guardian.discovery.snapshot import LISTEN_REFRESH_S, DiscoveryCache
from vllm_guardian.errors import ProbeFailed
from vllm_guardian.model import Target
from vllm_guardian.testing.fake_proc import FakeProcTree

SERVER = ("/opt/venv/bin/vllm", "serve", "m", "--port", "8000")
SQUATTER = ("/usr/bin/python3", "-c", "import time; time.sleep(1e9)", "vllm", "serve", "m", "--port", "8000")


@pytest.fixture
def tree(tmp_path):
    t = FakeProcTree(tmp_path / "proc")
    t.add_process(1, 0, ("/sbin/init",))
    return t


def port_target(api_url: str | None = None, autodiscover: bool = False):
    t: dict = {"name": "llm", "match": {"port": 8000}}
    if api_url:
        t["api_url"] = api_url
    return parse_config({"autodiscover": autodiscover, "targets": [t]})


def flags(**by_inode: bool):
    return lambda port: {int(k[1:]): v for k, v in by_inode.items()}


def no_flags(port: int) -> dict[int, bool]:
    raise AssertionError("the kernel was asked for IPV6_V6ONLY where it decides nothing")


def llm(result: DiscoveryResult) -> Target:
    t = result.target("llm")
    assert t is not None, result.unmatched
    return t


def in_trees(result, pid: int) -> bool:
    return any(p.pid == pid for t in result.targets for p in t.processes)


# ---------------------------------------------------------------- configured `port` targets
@pytest.mark.parametrize(
    "squat_ip, squat_first",
    [("127.0.0.2", True), ("127.0.0.2", False), ("::", True), ("10.0.0.5", True)],
)
def test_a_neighbour_on_another_address_is_not_the_target(tree, squat_ip, squat_first):
    starts = (1000, 2000) if squat_first else (2000, 1000)
    tree.add_process(300, 1, SQUATTER, starttime=starts[0])
    tree.listen(300, 8000, inode=3000, ip=squat_ip)
    tree.add_process(100, 1, SERVER, starttime=starts[1])
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    result = discover(tree.procfs(), port_target(), v6only=no_flags)
    t = result.target("llm")
    assert t is not None and (t.key.pid, t.api_url, t.other_listeners) == (100, "http://127.0.0.1:8000", 1)
    assert not in_trees(result, 300)


def test_its_url_is_loopback_not_the_address_the_owners_argv_names(tree):
    tree.add_process(100, 1, SERVER + ("--host", "0.0.0.0"))
    tree.listen(100, 8000, inode=1000, ip="0.0.0.0")
    assert llm(discover(tree.procfs(), port_target())).api_url == "http://127.0.0.1:8000"


def test_a_server_on_another_address_only_is_not_found_and_the_reason_says_where_it_listens(tree):
    tree.add_process(100, 1, SERVER + ("--host", "::1"))
    tree.listen(100, 8000, inode=1000, ip="::1")
    result = discover(tree.procfs(), port_target())
    assert result.targets == ()
    ((name, why),) = result.unmatched
    assert "no socket serves 127.0.0.1:8000" in why and "::1" in why and "api_url" in why


def test_an_api_url_names_the_address_and_family_matched(tree):
    tree.add_process(300, 1, SQUATTER, starttime=500)
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    tree.add_process(100, 1, SERVER, starttime=1000)
    tree.listen(100, 8000, inode=1000, ip="::1")
    t = discover(tree.procfs(), port_target("http://[::1]:8000")).target("llm")
    assert t is not None and (t.key.pid, t.api_url) == (100, "http://[::1]:8000")


@pytest.mark.parametrize(
    "kernel_says, found, socket",
    [
        (flags(i3000=True), None, None),  # IPv6-only: nothing serves 127.0.0.1
        (flags(i3000=False), 300, ""),  # dual-stack: it answers there
        (flags(), 300, "assumed"),  # the kernel did not say: taken, never restarted on it
    ],
    ids=["v6only", "dual-stack", "unknown"],
)
def test_a_lone_ipv6_wildcard_serves_the_ipv4_url_only_when_dual_stack(tree, kernel_says, found, socket):
    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="::")
    t = discover(tree.procfs(), port_target(), v6only=kernel_says).target("llm")
    assert (t.key.pid if t else None, t.socket if t else None) == (found, socket)
    if t is not None:
        assert t.port_verified is (socket != "assumed")


def test_a_sock_diag_failure_is_an_unknown_flag_not_a_failed_pass(tree):
    def refused(port: int) -> dict[int, bool]:
        raise ProbeFailed("sock_diag: [Errno 97] Address family not supported by protocol")

    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="::")
    t = discover(tree.procfs(), port_target(), v6only=refused).target("llm")
    assert t is not None and (t.socket, t.port_verified) == ("assumed", False)


def test_sockets_sharing_the_address_in_separate_trees_are_ambiguous(tree):
    """SO_REUSEPORT: two sockets on 127.0.0.1:8000 held by unrelated processes; the kernel spreads
    connections over both, so neither is the target."""
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    result = discover(tree.procfs(), port_target())
    assert result.targets == ()
    ((_, why),) = result.unmatched
    assert why.startswith("ambiguous: ") and "100" in why and "300" in why


def test_one_socket_held_by_separate_trees_is_ambiguous(tree):
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.add_process(300, 1, SQUATTER)
    tree.share_socket(300, 1000)  # an inherited fd in a process re-parented away, or passed to it
    result = discover(tree.procfs(), port_target())
    assert result.targets == () and result.unmatched[0][1].startswith("ambiguous: ")


def test_a_socket_the_launcher_shares_with_its_api_servers_is_the_launchers(tree):
    """--api-server-count 2: vLLM's launcher binds and hands the socket to its VLLM::APIServer_<i>."""
    tree.add_process(100, 1, SERVER + ("--api-server-count", "2"))
    tree.add_process(101, 100, ("VLLM::APIServer_0",))
    tree.add_process(102, 100, ("VLLM::APIServer_1",))
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.share_socket(101, 1000)
    tree.share_socket(102, 1000)
    t = discover(tree.procfs(), port_target()).target("llm")
    assert t is not None and t.key.pid == 100 and {p.pid for p in t.processes} == {100, 101, 102}


def test_sibling_processes_each_with_their_own_socket_are_ambiguous(tree):
    """Two servers a supervisor started side by side (SO_REUSEPORT): no one process tree serves the
    address; their common parent holds nothing and is not taken for one of them."""
    tree.add_process(90, 1, ("supervisord",))
    tree.add_process(101, 90, SERVER)
    tree.add_process(102, 90, SERVER)
    tree.listen(101, 8000, inode=1001, ip="127.0.0.1")
    tree.listen(102, 8000, inode=1002, ip="127.0.0.1")
    result = discover(tree.procfs(), port_target())
    assert result.targets == () and result.unmatched[0][1].startswith("ambiguous: ")


def test_an_api_url_host_that_is_a_name_needs_every_socket_of_the_port_in_one_tree(tree):
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    cfg = port_target("http://localhost:8000")
    assert llm(discover(tree.procfs(), cfg)).key.pid == 100
    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="::")
    result = discover(tree.procfs(), cfg, v6only=flags(i3000=True))
    assert result.targets == () and result.unmatched[0][1].startswith("ambiguous: ")


def test_a_more_specific_socket_is_seen_once_the_cached_answer_is_refresh_old(tree):
    """The wildcard owner keeps its socket; a neighbour binds 127.0.0.1:8000 beside it (SO_REUSEPORT,
    same user): the kernel now sends 127.0.0.1 to the neighbour. Within LISTEN_REFRESH_S the last
    pass's answer stands (no read of net/tcp); after it, the neighbour is what the URL reaches."""
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="0.0.0.0")
    cfg = port_target()
    cache = DiscoveryCache()
    first = cache.for_pass(0.0, frozenset())
    assert llm(discover(tree.procfs(), cfg, cache=first)).key.pid == 100
    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    soon = first.for_pass(LISTEN_REFRESH_S / 2, frozenset())
    assert llm(discover(tree.procfs(), cfg, cache=soon)).key.pid == 100
    later = soon.for_pass(LISTEN_REFRESH_S, frozenset())
    assert llm(discover(tree.procfs(), cfg, cache=later)).key.pid == 300


# ---------------------------------------------------------------- autodiscovery
def test_a_candidate_whose_url_nothing_serves_while_its_port_listens_elsewhere_is_ignored(tree):
    tree.add_process(50, 1, ("nginx",))
    tree.listen(50, 8000, inode=500, ip="127.0.0.2")
    tree.add_process(300, 1, SQUATTER)
    result = discover(tree.procfs(), parse_config({}))
    assert result.targets == ()
    ((key, why),) = result.ignored
    assert key.pid == 300 and "no socket serves 127.0.0.1:8000" in why


def test_a_candidate_on_its_own_address_and_the_server_are_two_targets(tree):
    """A process that does serve the URL its argv names (--host 127.0.0.2) is what that URL reaches."""
    tree.add_process(300, 1, SQUATTER + ("--host", "127.0.0.2"), starttime=500)
    tree.listen(300, 8000, inode=3000, ip="127.0.0.2")
    tree.add_process(100, 1, SERVER, starttime=1000)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    result = discover(tree.procfs(), parse_config({}))
    got = sorted((t.key.pid, t.api_url, t.socket) for t in result.targets)
    assert got == [(100, "http://127.0.0.1:8000", "owned"), (300, "http://127.0.0.2:8000", "owned")]


def test_a_candidate_sharing_its_address_with_another_tree_is_ignored_as_ambiguous(tree):
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.add_process(300, 1, ("/usr/bin/python3", "-c", "pass"))  # no claim: only its socket
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    result = discover(tree.procfs(), parse_config({}))
    assert result.targets == ()
    ((key, why),) = result.ignored
    assert key.pid == 100 and why.startswith("ambiguous: ") and "pid 300" in why


def test_unprivileged_a_candidate_sharing_its_address_with_an_unreadable_process_is_ambiguous(tree):
    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.add_process(300, 1, ("/usr/bin/python3", "-c", "pass"))  # another user's: its fds refused
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    tree.deny("300/fd")
    result = discover(tree.procfs(), parse_config({}))
    assert result.targets == ()
    ((key, why),) = result.ignored
    assert key.pid == 100 and why.startswith("ambiguous: ") and "cannot read" in why


# ---------------------------------------------------------------- said once
def test_an_ambiguous_configured_target_is_logged_once_as_a_warning(tree, caplog):
    from vllm_guardian.discovery.targets import TargetsStage
    from vllm_guardian.series import SeriesStore
    from vllm_guardian.state.tracker import Tracker

    tree.add_process(100, 1, SERVER)
    tree.listen(100, 8000, inode=1000, ip="127.0.0.1")
    tree.add_process(300, 1, SQUATTER)
    tree.listen(300, 8000, inode=3000, ip="127.0.0.1")
    cfg = port_target()
    log = logging.getLogger("test.discovery")
    stage = TargetsStage(cfg, tree.procfs(), Tracker.from_config(cfg), SeriesStore(), log)
    with caplog.at_level(logging.INFO, logger="test.discovery"):
        for now in (0.0, 10.0, 20.0):  # three passes
            stage.step(now)
            assert stage.worker.wait(10)
            stage.step(now + 0.1)
    said = [r for r in caplog.records if "ambiguous" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert stage.unmatched[0][1].startswith("ambiguous: ")
    stage.close()

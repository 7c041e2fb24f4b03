"""Discovery trusts sockets, not argv: a process is a server only if its tree holds the listening
socket of the URL it would be reached at; its ``--host`` is followed only to this node."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema import Config, DiscoveryConfig, MatchConfig, TargetConfig
from vllm_guardian.discovery.scan import discover
from vllm_guardian.host.procfs_parse import Listener
from vllm_guardian.testing.fake_proc import FakeProcTree

REAL = ("/opt/venv/bin/vllm", "serve", "m", "--port", "8000")
FAKE = ("/usr/bin/python3", "/tmp/vllm", "serve", "--port", "8000")  # sleeps; listens on nothing


@pytest.fixture
def tree(tmp_path):
    return FakeProcTree(tmp_path / "proc")


def cfg(*targets: TargetConfig) -> Config:
    return Config(targets=targets, discovery=DiscoveryConfig())


def real_server(tree: FakeProcTree, pid: int = 100, starttime: int = 1000, argv=REAL, port: int = 8000) -> None:
    tree.add_process(pid, cmdline=argv, starttime=starttime)
    tree.add_process(pid + 1, ppid=pid, cmdline=("VLLM::EngineCore",), starttime=starttime + 5)
    tree.listen(pid, port, inode=pid * 10)


@pytest.mark.parametrize("fake_first", [True, False])
def test_a_fake_naming_the_real_servers_port_is_ignored_and_the_socket_owner_is_the_target(tree, fake_first):
    real_server(tree, 100, starttime=2000 if fake_first else 1000)
    tree.add_process(300, cmdline=FAKE, starttime=1000 if fake_first else 2000)
    result = discover(tree.procfs(), cfg())
    (t,) = result.targets
    assert (t.key.pid, t.api_url, t.socket) == (100, "http://127.0.0.1:8000", "owned")
    ((key, why),) = result.ignored
    assert key.pid == 300 and "8000" in why


def test_a_fake_alone_naming_a_port_another_process_holds_is_ignored(tree):
    tree.add_process(50, cmdline=("nginx",))
    tree.listen(50, 8000, inode=500)
    tree.add_process(300, cmdline=FAKE)
    result = discover(tree.procfs(), cfg())
    assert result.targets == ()
    assert "served by pid 50" in result.ignored[0][1]


def test_a_server_still_loading_is_followed_until_its_port_is_taken_by_someone_else(tree):
    tree.add_process(100, cmdline=REAL)  # vLLM listens only once its engine is ready
    (t,) = discover(tree.procfs(), cfg()).targets
    assert t.socket == "starting"
    tree.listen(100, 8000, inode=1000)
    (t,) = discover(tree.procfs(), cfg()).targets
    assert t.socket == "owned"


def test_two_loading_candidates_for_one_url_keep_only_the_first_started(tree):
    tree.add_process(100, cmdline=REAL, starttime=1000)
    tree.add_process(300, cmdline=FAKE, starttime=2000)
    result = discover(tree.procfs(), cfg())
    assert [t.key.pid for t in result.targets] == [100]
    assert [k.pid for k, _ in result.ignored] == [300]


def test_the_socket_held_by_a_child_of_the_server_counts_as_its_own(tree):
    """--api-server-count 2: the vllm serve parent binds, its VLLM::APIServer_<i> children serve."""
    tree.add_process(100, cmdline=REAL + ("--api-server-count", "2"), starttime=1000)
    tree.add_process(101, ppid=100, cmdline=("VLLM::APIServer_0",))
    tree.add_process(102, ppid=100, cmdline=("VLLM::APIServer_1",))
    tree.listen(101, 8000, inode=777)
    tree.listen(102, 8000, inode=777)
    tree.add_process(300, cmdline=FAKE, starttime=500)
    (t,) = discover(tree.procfs(), cfg()).targets
    assert (t.key.pid, t.socket) == (100, "owned")


@pytest.mark.parametrize(
    "host, followed",
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("0.0.0.0", True),
        ("localhost", True),
        ("10.1.2.3", True),  # this node's address
        ("203.0.113.9", False),  # someone else's machine
        ("metadata.internal", False),  # a name: wherever DNS says
    ],
)
def test_an_autodiscovered_host_is_followed_only_to_this_node(tree, host, followed):
    tree.add_process(300, cmdline=FAKE[:-2] + ("--host", host, "--port", "8000"))
    result = discover(tree.procfs(), cfg(), local_addresses=lambda: frozenset({"10.1.2.3"}))
    assert bool(result.targets) == followed
    if not followed:
        assert "not followed" in result.ignored[0][1]


def test_a_configured_target_is_followed_wherever_its_host_is(tree):
    tree.add_process(100, cmdline=REAL + ("--host", "203.0.113.9"))
    tc = TargetConfig(name="remote", match=MatchConfig(cmdline_regex="vllm serve"))
    (t,) = discover(tree.procfs(), cfg(tc), local_addresses=frozenset).targets
    assert t.api_url == "http://203.0.113.9:8000"


def test_a_candidate_for_a_configured_targets_url_is_ignored(tree):
    real_server(tree, 100)
    tree.add_process(300, cmdline=FAKE)
    tc = TargetConfig(name="main", match=MatchConfig(port=8000))
    result = discover(tree.procfs(), cfg(tc))
    assert [t.name for t in result.targets] == ["main"]
    assert result.ignored[0][0].pid == 300


def test_unprivileged_a_socket_no_readable_process_holds_rules_out_a_readable_candidate(tree):
    """The guardian cannot read the real server's fds (another user's): its own-user fake, whose
    fds it can read and which holds no socket, is not the owner."""
    real_server(tree, 100)
    tree.deny("100/fd")
    tree.add_process(300, cmdline=FAKE)
    result = discover(tree.procfs(), cfg())
    assert [(t.key.pid, t.socket) for t in result.targets] == [(100, "unverified")]
    ((key, why),) = result.ignored
    assert key.pid == 300 and "cannot read" in why


def test_unprivileged_when_nothing_can_be_read_the_first_started_is_followed_unverified(tree):
    real_server(tree, 100, starttime=1000)
    tree.deny("100/fd")
    tree.add_process(300, cmdline=FAKE, starttime=2000)
    tree.deny("300/fd")
    result = discover(tree.procfs(), cfg())
    (t,) = result.targets
    assert (t.key.pid, t.socket) == (100, "unverified")
    assert [k.pid for k, _ in result.ignored] == [300]


def test_once_its_owner_is_known_a_pass_checks_the_socket_without_reading_net_tcp(tree):
    """The owner found by one pass still holds the socket: the next passes read its fds only (a
    read of /proc/net/tcp walks the kernel's whole connection table)."""
    from vllm_guardian.discovery.snapshot import DiscoveryCache

    real_server(tree, 100)
    procfs = tree.procfs()
    reads: list[int] = []
    original = procfs.listening_sockets

    def counted() -> dict[int, list[Listener]]:
        reads.append(1)
        return original()

    procfs.listening_sockets = counted
    cache = DiscoveryCache()
    for now in (0.0, 5.0, 10.0):
        pass_cache = cache.for_pass(now, frozenset())
        (t,) = discover(procfs, cfg(), cache=pass_cache).targets
        assert t.socket == "owned"
        cache = pass_cache
    assert len(reads) == 1

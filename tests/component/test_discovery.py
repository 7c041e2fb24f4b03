"""Discovery against fake /proc trees: autodiscovery, explicit matchers, roles, orphans."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema import Config, DiscoveryConfig, MatchConfig, TargetConfig, KubernetesMatch
from vllm_guardian.discovery.scan import DiscoveryResult, discover, is_api_server
from vllm_guardian.discovery.sockets import server_host, server_port
from vllm_guardian.model import ProcKey, Role, Target
from vllm_guardian.testing.fake_proc import FakeProcTree

API = ("/opt/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8000")
TRACKER = ("/opt/venv/bin/python3", "-B", "-c", "from multiprocessing.resource_tracker import main;main(44)")


@pytest.fixture
def tree(tmp_path):
    t = FakeProcTree(tmp_path / "proc")
    t.add_process(1, ppid=0, cmdline=("/sbin/init",))
    return t


def vllm_tree(tree: FakeProcTree, root: int = 100, cmdline=API, prefix: str = "VLLM", ppid: int = 1) -> None:
    """API server → EngineCore → Worker_TP0; API server → resource tracker."""
    tree.add_process(root, ppid=ppid, cmdline=cmdline)
    tree.add_process(root + 1, ppid=root, cmdline=(f"{prefix}::EngineCore",))
    tree.add_process(root + 2, ppid=root + 1, cmdline=(f"{prefix}::Worker_TP0",))
    tree.add_process(root + 3, ppid=root, cmdline=TRACKER)


def cfg(*targets: TargetConfig, autodiscover: bool = True, prefix: str = "VLLM") -> Config:
    return Config(autodiscover=autodiscover, targets=targets, discovery=DiscoveryConfig(process_name_prefix=prefix))


def found(result: DiscoveryResult, name: str) -> Target:
    target = result.target(name)
    assert target is not None, f"{name} was not discovered"
    return target


def roles(target) -> dict[int, Role]:
    return {p.pid: p.role for p in target.processes}


# ---------------------------------------------------------------- autodiscovery
def test_autodiscovers_a_vllm_tree_with_roles(tree):
    vllm_tree(tree)
    result = discover(tree.procfs(), cfg())
    assert len(result.targets) == 1
    t = result.targets[0]
    assert (t.name, t.port, t.api_url, t.source) == ("vllm-8000", 8000, "http://127.0.0.1:8000", "autodiscover")
    assert t.key == tree.procfs().identity(100)
    assert roles(t) == {100: Role.API_SERVER, 101: Role.ENGINE_CORE, 102: Role.WORKER, 103: Role.OTHER}
    assert t.processes[0].pid == 100  # the root first
    assert result.orphans == () and result.unmatched == ()


def test_the_tree_records_ppid_starttime_and_cmdline(tree):
    vllm_tree(tree)
    t = discover(tree.procfs(), cfg()).targets[0]
    core = t.by_role(Role.ENGINE_CORE)[0]
    assert core.ppid == 100
    assert core.key == tree.procfs().identity(101)
    assert core.cmdline == ("VLLM::EngineCore",)


@pytest.mark.parametrize(
    "cmdline, name, url",
    [
        (
            ("/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8001"),
            "vllm-8001",
            "http://127.0.0.1:8001",
        ),
        (
            ("/usr/local/bin/vllm", "serve", "m", "--port=8002", "--host", "10.0.0.5"),
            "vllm-8002",
            "http://10.0.0.5:8002",
        ),
        (
            ("python", "-m", "vllm_guardian.sim.vllm.api_server", "--host", "0.0.0.0"),
            "vllm-8000",
            "http://127.0.0.1:8000",
        ),
        (
            ("python3.11", "-u", "-X", "dev", "/srv/api_server.py", "--host=::", "--port", "9000"),
            "vllm-9000",
            "http://127.0.0.1:9000",
        ),
        (("vllm", "serve", "m", "--host", "::1", "--port", "8003"), "vllm-8003", "http://[::1]:8003"),
    ],
)
def test_autodiscovered_name_port_and_url(tree, cmdline, name, url):
    tree.add_process(100, cmdline=cmdline)
    (t,) = discover(tree.procfs(), cfg(), local_addresses=lambda: frozenset({"10.0.0.5"})).targets
    assert (t.name, t.api_url) == (name, url)


@pytest.mark.parametrize(
    "cmdline",
    [
        ("python3", "-m", "pytest", "tests/api_server"),
        ("python3", "-c", "import vllm.entrypoints.openai.api_server"),
        ("python3", "-m", "vllm.entrypoints.openai.api_server_utils"),
        ("python3", "/srv/not_api_server.py.bak"),
        ("vllm", "bench", "serve"),
        ("/usr/bin/myvllm", "serve"),
        ("bash", "-c", "vllm serve m"),
        TRACKER,
        ("VLLM::EngineCore",),
        (),
    ],
)
def test_not_an_api_server(tree, cmdline):
    assert not is_api_server(cmdline)
    tree.add_process(100, cmdline=cmdline)
    assert discover(tree.procfs(), cfg()).targets == ()


def test_autodiscover_off_finds_nothing(tree):
    vllm_tree(tree)
    result = discover(tree.procfs(), cfg(autodiscover=False))
    assert result.targets == ()


def test_a_forked_child_keeping_the_servers_argv_stays_inside_the_tree(tree):
    tree.add_process(100, cmdline=API)
    tree.add_process(101, ppid=100, cmdline=API)  # fork before setproctitle
    (t,) = discover(tree.procfs(), cfg()).targets
    assert t.key.pid == 100
    assert roles(t) == {100: Role.API_SERVER, 101: Role.OTHER}


def test_two_servers_two_targets_in_start_order(tree):
    vllm_tree(tree, 100)
    vllm_tree(tree, 200, cmdline=("vllm", "serve", "m", "--port", "8001"))
    result = discover(tree.procfs(), cfg())
    assert [t.name for t in result.targets] == ["vllm-8000", "vllm-8001"]
    assert {p.pid for p in result.targets[1].processes} == {200, 201, 202, 203}


def test_same_port_on_two_addresses_gets_a_unique_name(tree):
    tree.add_process(100, cmdline=API)
    tree.add_process(200, cmdline=API + ("--host", "10.0.0.5"))
    result = discover(tree.procfs(), cfg(), local_addresses=lambda: frozenset({"10.0.0.5"}))
    assert [t.name for t in result.targets] == ["vllm-8000", "vllm-8000-200"]


def test_custom_process_name_prefix(tree):
    vllm_tree(tree, prefix="MYCO")
    tree.add_process(300, cmdline=("VLLM::EngineCore",))  # default prefix: not ours now
    result = discover(tree.procfs(), cfg(prefix="MYCO"))
    (t,) = result.targets
    assert roles(t) == {100: Role.API_SERVER, 101: Role.ENGINE_CORE, 102: Role.WORKER, 103: Role.OTHER}
    assert result.orphans == ()


@pytest.mark.parametrize(
    "title, role",
    [
        ("VLLM::EngineCore_DP1", Role.ENGINE_CORE),
        ("VLLM::Worker_TP1_PP0", Role.WORKER),
        ("VLLM::APIServer_2", Role.API_SERVER),
        ("VLLM::DPCoordinator", Role.OTHER),
        ("python3", Role.OTHER),
        ("VLLMX::EngineCore", Role.OTHER),
    ],
)
def test_roles_by_title_prefix(tree, title, role):
    tree.add_process(100, cmdline=API)
    tree.add_process(101, ppid=100, cmdline=(title,))
    (t,) = discover(tree.procfs(), cfg()).targets
    assert roles(t)[101] is role


# ---------------------------------------------------------------- robustness
def test_a_process_vanishing_mid_scan_is_skipped(tree):
    vllm_tree(tree)
    tree.add_process(500, cmdline=("sleep", "1"))
    tree.vanish_on_read(500, "stat")
    result = discover(tree.procfs(), cfg())
    assert not (tree.root / "500").exists()  # it was listed, then exited before its stat was read
    assert [t.name for t in result.targets] == ["vllm-8000"]


def test_a_child_vanishing_mid_scan_leaves_the_rest_of_the_tree(tree):
    vllm_tree(tree)
    tree.vanish_on_read(103, "cmdline")
    (t,) = discover(tree.procfs(), cfg()).targets
    assert sorted(roles(t)) == [100, 101, 102]


def test_a_denied_process_is_skipped(tree):
    vllm_tree(tree)
    tree.add_process(500, cmdline=API + ("--port", "9000"))
    tree.deny("500/cmdline")
    result = discover(tree.procfs(), cfg())
    assert [t.name for t in result.targets] == ["vllm-8000"]


def test_a_zombie_child_stays_in_the_tree(tree):
    vllm_tree(tree)
    tree.zombie(103)
    (t,) = discover(tree.procfs(), cfg()).targets
    assert roles(t)[103] is Role.OTHER


# ---------------------------------------------------------------- orphans
def test_orphans_after_the_api_server_died(tree):
    vllm_tree(tree)
    tree.remove(100)
    tree.set_process(101, ppid=1)  # re-parented EngineCore, its worker follows it
    tree.set_process(103, ppid=1)
    result = discover(tree.procfs(), cfg())
    assert result.targets == ()
    assert [(o.pid, o.role) for o in result.orphans] == [(101, Role.ENGINE_CORE), (102, Role.WORKER)]
    assert result.orphans[0].key == ProcKey(101, tree.procfs().identity(101).starttime)


# ---------------------------------------------------------------- explicit targets
def test_port_matcher_takes_the_topmost_owner_of_the_listen_socket(tree):
    vllm_tree(tree, cmdline=("/opt/bin/my-launcher", "--model", "m"))
    tree.listen(100, 8000, inode=9001)
    tree.share_socket(101, 9001)  # inherited fd
    tc = TargetConfig(name="llama", match=MatchConfig(port=8000))
    result = discover(tree.procfs(), cfg(tc))
    (t,) = result.targets
    assert (t.name, t.key.pid, t.port, t.api_url, t.source) == ("llama", 100, 8000, "http://127.0.0.1:8000", "config")
    assert roles(t)[101] is Role.ENGINE_CORE


def test_port_matcher_ignores_non_listening_sockets(tree):
    tree.add_process(100, cmdline=("server",))
    tree.add_process(200, cmdline=("client",))
    tree.listen(100, 8000, inode=9001)
    tree.connect(200, 8000, inode=9100)
    (t,) = discover(tree.procfs(), cfg(TargetConfig("x", MatchConfig(port=8000)))).targets
    assert t.key.pid == 100


def test_port_matcher_on_ipv6_listener(tree):
    tree.add_process(100, cmdline=("server",))
    tree.listen(100, 8000, inode=9001, ip="::")
    (t,) = discover(tree.procfs(), cfg(TargetConfig("x", MatchConfig(port=8000)))).targets
    assert t.key.pid == 100


def test_port_matcher_with_nothing_listening_is_unmatched(tree):
    vllm_tree(tree)
    result = discover(tree.procfs(), cfg(TargetConfig("llama", MatchConfig(port=8100)), autodiscover=False))
    assert result.targets == ()
    assert result.unmatched == (("llama", "no process listens on port 8100"),)


def test_port_matcher_with_unreadable_net_tcp_is_unmatched(tree):
    vllm_tree(tree)
    tree.listen(100, 8000, inode=9001)
    tree.deny("net/tcp")
    result = discover(tree.procfs(), cfg(TargetConfig("llama", MatchConfig(port=8000)), autodiscover=False))
    ((name, why),) = result.unmatched
    assert name == "llama" and why.startswith("cannot read listening sockets")


def test_fds_are_scanned_once_per_pass_and_only_for_port_matchers(tree):
    vllm_tree(tree)
    tree.listen(100, 8000, inode=9001)
    reads: list[str] = []

    def listdir(path: str) -> list[str]:
        reads.append(path)
        return tree.listdir(path)

    procfs = tree.procfs(listdir=listdir)
    discover(procfs, cfg(TargetConfig("a", MatchConfig(cmdline_regex="api_server"))))
    assert not any(p.endswith("/fd") for p in reads)
    reads.clear()
    two = cfg(TargetConfig("a", MatchConfig(port=8000)), TargetConfig("b", MatchConfig(port=8001)))
    discover(procfs, two)
    fd_scans = [p for p in reads if p.endswith("/fd")]
    assert len(fd_scans) == len(set(fd_scans)) == 5  # init + 4 processes, each once


def test_an_explicit_target_claims_its_tree_from_autodiscovery(tree):
    vllm_tree(tree)
    tree.listen(100, 8000, inode=9001)
    result = discover(tree.procfs(), cfg(TargetConfig("llama", MatchConfig(port=8000))))
    assert [(t.name, t.source) for t in result.targets] == [("llama", "config")]


def test_autodiscovery_skips_servers_inside_an_explicit_tree(tree):
    tree.add_process(50, cmdline=("supervisor",))
    vllm_tree(tree, ppid=50)
    result = discover(tree.procfs(), cfg(TargetConfig("all", MatchConfig(cmdline_regex="^supervisor"))))
    assert [t.name for t in result.targets] == ["all"]
    assert roles(result.targets[0])[101] is Role.ENGINE_CORE


def test_pid_file_matcher(tree, tmp_path):
    vllm_tree(tree)
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text("100\n")
    tc = TargetConfig("llama", MatchConfig(pid_file=str(pid_file)), api_url="http://127.0.0.1:8000")
    (t,) = discover(tree.procfs(), cfg(tc)).targets
    assert (t.name, t.key.pid, t.port, t.api_url) == ("llama", 100, 8000, "http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "content, why",
    [
        ("4242\n", "pid 4242 from {f} is not running"),
        ("not-a-pid", "pid file {f}: not a pid: 'not-a-pid'"),
        ("", "pid file {f}: not a pid: ''"),
        (None, "pid file {f}: No such file or directory"),
    ],
)
def test_pid_file_matcher_failures_are_unmatched(tree, tmp_path, content, why):
    vllm_tree(tree)
    pid_file = tmp_path / "vllm.pid"
    if content is not None:
        pid_file.write_text(content)
    result = discover(
        tree.procfs(), cfg(TargetConfig("llama", MatchConfig(pid_file=str(pid_file))), autodiscover=False)
    )
    assert result.unmatched == (("llama", why.format(f=pid_file)),)


def test_pid_file_pointing_at_a_zombie_is_unmatched(tree, tmp_path):
    vllm_tree(tree)
    tree.zombie(100)
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text("100")
    result = discover(tree.procfs(), cfg(TargetConfig("llama", MatchConfig(pid_file=str(pid_file)))))
    assert result.unmatched == (("llama", f"pid 100 from {pid_file} is not running"),)


def test_pid_file_is_read_through_the_seam(tree):
    vllm_tree(tree)
    tc = TargetConfig("llama", MatchConfig(pid_file="/run/vllm.pid"))
    result = discover(tree.procfs(), cfg(tc), read_file={"/run/vllm.pid": "100"}.__getitem__)
    assert result.targets[0].key.pid == 100


def test_cmdline_regex_takes_the_ancestor_when_both_match(tree):
    vllm_tree(tree)
    tree.add_process(104, ppid=100, cmdline=API)  # a fork that kept the argv
    tc = TargetConfig("llama", MatchConfig(cmdline_regex=r"api_server .*--port 8000"))
    (t,) = discover(tree.procfs(), cfg(tc)).targets
    assert (t.key.pid, t.port, t.api_url) == (100, 8000, "http://127.0.0.1:8000")


def test_cmdline_regex_port_from_api_url(tree):
    tree.add_process(100, cmdline=("/opt/bin/serve-model",))
    tc = TargetConfig("m", MatchConfig(cmdline_regex="serve-model"), api_url="http://10.1.2.3:9100")
    (t,) = discover(tree.procfs(), cfg(tc)).targets
    assert (t.port, t.api_url) == (9100, "http://10.1.2.3:9100")


def test_cmdline_regex_without_a_match_is_unmatched(tree):
    vllm_tree(tree)
    result = discover(tree.procfs(), cfg(TargetConfig("x", MatchConfig(cmdline_regex="sglang"))))
    assert result.unmatched == (("x", "no process cmdline matches 'sglang'"),)
    assert [t.name for t in result.targets] == ["vllm-8000"]


def test_two_targets_matching_the_same_process(tree):
    vllm_tree(tree)
    a = TargetConfig("a", MatchConfig(cmdline_regex="api_server"))
    b = TargetConfig("b", MatchConfig(cmdline_regex="--model m"))
    result = discover(tree.procfs(), cfg(a, b))
    assert [t.name for t in result.targets] == ["a"]
    assert result.unmatched == (("b", "process 100 is already target a"),)


@pytest.mark.parametrize(
    "match",
    [MatchConfig(systemd_unit="vllm@llama.service"), MatchConfig(kubernetes=KubernetesMatch(pod="p"))],
)
def test_platform_matchers_without_a_platform_seam_are_reported_unmatched(tree, match):
    vllm_tree(tree)
    result = discover(tree.procfs(), cfg(TargetConfig("llama", match)))
    assert result.unmatched == (("llama", "no platform matcher wired (kubernetes / systemd)"),)
    assert [t.name for t in result.targets] == ["vllm-8000"]  # autodiscovery still sees it


# ---------------------------------------------------------------- pure helpers
@pytest.mark.parametrize(
    "argv, port",
    [
        (("--port", "8001"), 8001),
        (("--port=8002",), 8002),
        ((), 8000),
        (("--port", "x"), 8000),
        (("--port", "99999"), 8000),
        (("--port", "1", "--port", "2"), 2),
        (("--port",), 8000),
    ],
)
def test_server_port(argv, port):
    assert server_port(("vllm", "serve") + argv) == port


@pytest.mark.parametrize(
    "argv, host",
    [
        ((), "127.0.0.1"),
        (("--host", "0.0.0.0"), "127.0.0.1"),
        (("--host=::",), "127.0.0.1"),
        (("--host", "10.0.0.5"), "10.0.0.5"),
    ],
)
def test_server_host(argv, host):
    assert server_host(("vllm", "serve") + argv) == host


class CountingOpener:
    """Counts fd-table listings: the expensive part of matching a port to its owner."""

    def __init__(self, tree):
        self.tree = tree
        self.fd_listings = 0

    def listdir(self, path):
        if path.rstrip("/").endswith("/fd"):
            self.fd_listings += 1
        return self.tree.listdir(path)


def test_a_cache_spares_the_fd_scan_while_the_port_owner_is_unchanged(tmp_path):
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.discovery.scan import discover
    from vllm_guardian.discovery.snapshot import DiscoveryCache
    from vllm_guardian.testing.fake_proc import FakeProcTree

    tree = FakeProcTree(tmp_path / "proc")
    for pid in range(300, 340):
        tree.add_process(pid, 1, ("sleep", "1000"))
    tree.add_process(100, 1, ("python3", "/opt/serve.py"))
    tree.listen(100, 8000, inode=777)
    counter = CountingOpener(tree)
    procfs = tree.procfs(listdir=counter.listdir)
    cfg = parse_config({"autodiscover": False, "targets": [{"name": "llm", "match": {"port": 8000}}]})
    cache = DiscoveryCache()
    first = discover(procfs, cfg, cache=cache)
    full = counter.fd_listings
    second = discover(procfs, cfg, cache=cache)
    assert found(first, "llm").key == found(second, "llm").key
    assert full >= 41 and counter.fd_listings - full == 1  # one process's fds, not every process's


def _port_owner_world(tmp_path):
    """A server (pid 100) listening on 8000, a config matching that port, and an empty cache."""
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.discovery.snapshot import DiscoveryCache
    from vllm_guardian.testing.fake_proc import FakeProcTree

    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(100, 1, ("python3", "/opt/serve.py"))
    tree.listen(100, 8000, inode=777)
    cfg = parse_config({"autodiscover": False, "targets": [{"name": "llm", "match": {"port": 8000}}]})
    return tree, cfg, DiscoveryCache()


def test_a_cache_is_not_trusted_once_the_owner_changed(tmp_path):
    from vllm_guardian.discovery.scan import discover

    tree, cfg, cache = _port_owner_world(tmp_path)
    discover(tree.procfs(), cfg, cache=cache)
    tree.remove(100)
    tree.add_process(200, 1, ("python3", "/opt/serve.py"))  # restarted: a new owner, same port and inode
    tree.listen(200, 8000, inode=777)
    assert found(discover(tree.procfs(), cfg, cache=cache), "llm").key.pid == 200


def test_a_cache_spares_the_connection_table_while_the_owner_holds_its_socket(tmp_path):
    """/proc/net/tcp is read once: its read walks the kernel's whole connection table."""
    from vllm_guardian.discovery.scan import discover

    tree, cfg, cache = _port_owner_world(tmp_path)
    reads: list[str] = []

    def opener(path: str):
        reads.append(path)
        return tree.opener(path)

    for _ in range(3):
        assert found(discover(tree.procfs(opener=opener), cfg, cache=cache), "llm").key.pid == 100
    assert sum(1 for p in reads if p.endswith("/net/tcp")) == 1


def test_a_new_listener_is_found_once_the_cached_owner_let_its_socket_go(tmp_path):
    from vllm_guardian.discovery.scan import discover

    tree, cfg, cache = _port_owner_world(tmp_path)
    discover(tree.procfs(), cfg, cache=cache)
    tree.add_process(200, 1, ("python3", "/opt/serve.py"))  # 100 lives on, closed its socket
    tree.close_listener(100, 8000)
    tree.listen(200, 8000, inode=888)
    assert found(discover(tree.procfs(), cfg, cache=cache), "llm").key.pid == 200


def test_a_settled_title_is_not_read_again_but_a_young_one_is(tmp_path):
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.discovery.scan import discover
    from vllm_guardian.discovery.snapshot import CMDLINE_SETTLE_S, DiscoveryCache
    from vllm_guardian.testing.fake_proc import FakeProcTree

    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(100, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"))
    tree.add_process(110, 100, ("python3", "-c", "from multiprocessing.spawn import spawn_main"))
    cfg = parse_config({})
    cache = DiscoveryCache(now=0.0)
    assert found(discover(tree.procfs(), cfg, cache=cache), "vllm-8000").processes[1].role is Role.OTHER
    tree.set_process(110, cmdline=("VLLM::EngineCore",))  # the child retitles itself a moment later
    cache.now = 2.0
    assert found(discover(tree.procfs(), cfg, cache=cache), "vllm-8000").processes[1].role is Role.ENGINE_CORE
    reads: list[str] = []

    def opener(path: str):
        reads.append(path)
        return tree.opener(path)

    procfs = tree.procfs(opener=opener)
    cache.now = 2.0 + CMDLINE_SETTLE_S
    discover(procfs, cfg, cache=cache)
    assert not [p for p in reads if p.endswith("/cmdline")]


# ---------------------------------------------------------------- processes a pass blocked on
def _counting(tree: FakeProcTree, reads: list[str]):
    def opener(path: str):
        reads.append(path)
        return tree.opener(path)

    return tree.procfs(opener=opener)


def test_a_skipped_process_without_a_known_title_is_left_out_like_an_unreadable_one(tree):
    vllm_tree(tree)
    tree.add_process(200, 1, API[:-1] + ("8001",))
    from vllm_guardian.discovery.snapshot import DiscoveryCache

    skip = frozenset({tree.procfs().identity(200)})
    reads: list[str] = []
    result = discover(_counting(tree, reads), cfg(), cache=DiscoveryCache().for_pass(0.0, skip))
    assert [t.name for t in result.targets] == ["vllm-8000"]
    assert not [p for p in reads if p.endswith("/200/cmdline")]


def test_a_skipped_process_keeps_the_title_read_before(tree):
    vllm_tree(tree)
    from vllm_guardian.discovery.snapshot import DiscoveryCache

    cache = DiscoveryCache()
    discover(tree.procfs(), cfg(), cache=cache)
    reads: list[str] = []
    skip = frozenset({tree.procfs().identity(100)})
    result = discover(_counting(tree, reads), cfg(), cache=cache.for_pass(1.0, skip))
    assert found(result, "vllm-8000").key == tree.procfs().identity(100)
    assert not [p for p in reads if p.endswith("/100/cmdline")]


def test_a_pass_records_each_identity_it_read_by_pid(tree):
    vllm_tree(tree)
    from vllm_guardian.discovery.snapshot import DiscoveryCache

    cache = DiscoveryCache()
    discover(tree.procfs(), cfg(), cache=cache)
    assert cache.keys[101] == tree.procfs().identity(101) and set(cache.keys) == {1, 100, 101, 102, 103}


def test_a_pass_copy_of_the_cache_is_its_own(tree):
    vllm_tree(tree)
    from vllm_guardian.discovery.snapshot import DiscoveryCache

    cache = DiscoveryCache()
    copy = cache.for_pass(5.0, frozenset())
    discover(tree.procfs(), cfg(), cache=copy)
    assert copy.cmdlines and not cache.cmdlines and not cache.keys

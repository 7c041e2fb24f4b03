"""Unprivileged ``match.port``: where other users' sockets cannot be read, the port in the server's
own command line finds it, marked not verified, said once; status and metrics list what the
guardian lacks. The fake /proc answers EACCES (PermissionError) where another user's fds would."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.config.schema import Config, DiscoveryConfig, MatchConfig, TargetConfig
from vllm_guardian.discovery.scan import discover
from vllm_guardian.surface.exporter import GuardianCollector
from vllm_guardian.surface.status_render import render_status
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.testing.fake_proc import FakeProcTree
from tests.support.daemon_world import API, World

SERVE = ("/opt/venv/bin/vllm", "serve", "m", "--port", "8001")


@pytest.fixture
def tree(tmp_path):
    return FakeProcTree(tmp_path / "proc")


def by_port(port: int = 8001) -> Config:
    return Config(
        targets=(TargetConfig(name="llm", match=MatchConfig(port=port)),),
        discovery=DiscoveryConfig(),
        autodiscover=False,
    )


def others_server(tree: FakeProcTree, denied: str, argv=SERVE, port: int = 8001) -> None:
    """Another user's vLLM: listening on ``port``, its fds refused (``denied`` below /proc)."""
    tree.add_process(100, cmdline=argv, starttime=1000)
    tree.add_process(101, ppid=100, cmdline=("VLLM::EngineCore",), starttime=1005)
    tree.listen(100, port, inode=1000)
    tree.deny(denied)


@pytest.mark.parametrize("denied", ["100/fd", "100/fd/3"], ids=["fd-table", "fd-link"])
def test_a_port_target_whose_sockets_are_unreadable_is_found_by_its_argv_and_marked_unverified(tree, denied):
    others_server(tree, denied)
    result = discover(tree.procfs(), by_port())
    (t,) = result.targets
    assert (t.key.pid, t.port, t.socket, t.port_verified) == (100, 8001, "argv", False)
    assert [p.pid for p in t.processes] == [100, 101]
    assert result.fds_denied == (100,)


def test_a_readable_process_naming_the_port_is_not_taken_for_the_unreadable_owner(tree):
    others_server(tree, "100/fd", argv=("/usr/bin/python3", "-m", "http.server", "8001"))
    tree.add_process(300, cmdline=SERVE, starttime=500)  # the guardian's user: fds readable, no socket
    result = discover(tree.procfs(), by_port())
    assert result.targets == ()
    assert "no vLLM command line names the port" in result.unmatched[0][1]


def test_no_argv_fallback_while_nothing_listens_on_the_port(tree):
    tree.add_process(100, cmdline=SERVE)
    tree.deny("100/fd")
    result = discover(tree.procfs(), by_port())
    assert result.targets == () and "no process listens on port 8001" in result.unmatched[0][1]


def test_a_readable_socket_owner_is_matched_verified_as_before(tree):
    tree.add_process(100, cmdline=SERVE)
    tree.listen(100, 8001, inode=1000)
    result = discover(tree.procfs(), by_port())
    (t,) = result.targets
    assert (t.socket, t.port_verified, result.sockets_denied) == ("", True, False)


def test_status_and_metrics_list_the_unverified_port_and_the_missing_capabilities(tmp_path, caplog):
    """The daemon's own status: the target is shown not verified, its remediation off, the socket
    capability (found on the first EACCES) and ptrace/kill (from CapEff at start) listed and
    exported; the fallback and each capability are said once over many discovery passes."""
    w = World(tmp_path, {"autodiscover": False, "targets": [{"name": "llm", "match": {"port": 8000}}]})
    w.d.runner.shutdown()
    w.proc.listen(API, 8000, inode=4242)
    w.proc.deny(f"{API}/fd")  # another user's server
    w.proc.write("self/status", b"Name:\tguardian\nCapEff:\t0000000000000000\n")  # an ordinary user
    with caplog.at_level(logging.WARNING, "test-daemon"):
        w.d = w.new_daemon()
        try:
            w.step(30)
            snapshot = w.d.status()
            doc = snapshot.to_dict()
        finally:
            w.d.runner.shutdown()
    t = doc["targets"][0]
    assert (t["name"], t["socket"], t["port_verified"]) == ("llm", "argv", False)
    assert t["auto_remediation"] == "off (port not verified)"
    missing = [c["capability"] for c in doc["capabilities"]["missing"]]
    assert missing == ["ptrace", "read_other_users_sockets", "signal_other_users"]
    table = render_status(StatusSnapshot.from_dict(doc))  # as `guardian status` reads the control socket's
    assert "port 8000 not verified: the guardian cannot read this process's sockets" in table
    assert "CAPABILITIES MISSING" in table and "read_other_users_sockets" in table
    fams = {f.name: f for f in GuardianCollector(lambda: snapshot).collect()}
    exported = sorted(s.labels["capability"] for s in fams["guardian_capability_missing"].samples)
    assert exported == missing
    said = [r.getMessage() for r in caplog.records]
    assert sum("matched by the port its command line names" in m for m in said) == 1
    assert sum("capability missing: read_other_users_sockets" in m for m in said) == 1
    assert f"/proc/{API}/fd answered EACCES" in doc["capabilities"]["missing"][1]["why"]

"""Unprivileged: the port a server's argv names, and the capabilities the guardian lacks."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.discovery.argv import argv_candidates, argv_port
from vllm_guardian.host.capabilities import Capabilities, Capability, cap_eff, from_privileges, missing

SERVE = ("/opt/venv/bin/vllm", "serve", "meta/llama")
MODULE = ("/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server")


@pytest.mark.parametrize(
    "argv, port",
    [
        (SERVE + ("--port", "8001"), 8001),
        (SERVE + ("--port=8002",), 8002),
        (SERVE, 8000),  # vLLM's default
        (SERVE + ("--port", "8001", "--port", "9000"), 9000),  # the last one wins, as argparse does
        (MODULE + ("--port", "8003"), 8003),
        (SERVE + ("--port", "http"), None),  # vLLM would refuse to start
        (SERVE + ("--port", "70000"), None),
        (SERVE + ("--port", "0"), None),
        (("/usr/bin/nginx", "--port", "8000"), None),  # not a vLLM API server
        (("VLLM::EngineCore",), None),
        ((), None),
    ],
    ids=[
        "space",
        "equals",
        "default",
        "last-wins",
        "module",
        "not-a-number",
        "too-big",
        "zero",
        "not-vllm",
        "engine-core",
        "empty",
    ],
)
def test_the_port_a_vllm_servers_argv_names(argv, port):
    assert argv_port(argv) == port


def test_only_unreadable_vllm_servers_naming_the_port_are_candidates():
    cmdlines = {
        10: SERVE + ("--port", "8001"),  # unreadable, names the port: a candidate
        11: SERVE + ("--port", "8001"),  # readable: known not to hold the socket
        12: SERVE + ("--port", "8002"),  # unreadable, another port
        13: ("/bin/sleep", "--port", "8001"),  # unreadable, not vLLM
    }
    assert argv_candidates(8001, {10, 12, 13}, cmdlines) == {10}


@pytest.mark.parametrize(
    "status, lacking",
    [
        ("Name:\tguardian\nCapEff:\t000001ffffffffff\n", []),  # root
        ("CapEff:\t0000000000000000\n", ["ptrace", "signal_other_users"]),  # an ordinary user
        ("CapEff:\t0000000000080000\n", ["signal_other_users"]),  # CAP_SYS_PTRACE only
        ("CapEff:\t0000000000000020\n", ["ptrace"]),  # CAP_KILL only
        ("Name:\tguardian\n", []),  # unknown: nothing is claimed
    ],
    ids=["root", "user", "ptrace-only", "kill-only", "unknown"],
)
def test_capabilities_lacking_by_the_effective_mask(status, lacking):
    assert [m.capability for m in from_privileges(cap_eff(status))] == lacking


def test_a_missing_capability_is_logged_once_and_listed(caplog):
    caps = Capabilities(logging.getLogger("test-caps"))
    with caplog.at_level(logging.WARNING, "test-caps"):
        for _ in range(3):
            caps.note(missing(Capability.READ_SOCKETS, "EACCES"))
    assert [r.getMessage().count("read_other_users_sockets") for r in caplog.records] == [1]
    assert [m.capability for m in caps.missing()] == ["read_other_users_sockets"]
    assert caps.lacks(Capability.READ_SOCKETS) and not caps.lacks(Capability.PTRACE)

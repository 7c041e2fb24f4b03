"""Live: who owns a server's port is decided by the address and family its URL names, as the kernel
decides who answers there; a neighbour listening on the same port at another address is nobody's
target. Real sockets bound by real child processes (``tests.support.squatters``) beside the
simulated vLLM (``vllm_guardian.sim``), discovered through the real /proc and the kernel's sock_diag.

The squatters start first: the audit's case (E1) was a process on ``127.0.0.2:P`` or an IPv6-only
``[::]:P`` that, older than the server, became the configured target ``match: {port: P}``: the real
engine's hang was filed against the squatter's tree, and a restart would have stopped it.
"""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import DiscoveryResult, discover
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import sweep
from tests.support.squatters import Bind, Squatter, claims, port_free_everywhere

pytestmark = pytest.mark.live

NEIGHBOURS: dict[str, tuple[str, bool]] = {  # where a squatter binds (host, IPV6_V6ONLY); none serves 127.0.0.1
    "127.0.0.2": ("127.0.0.2", False),
    "[::] IPV6_V6ONLY": ("::", True),
}


def neighbour(where: str, port: int) -> Bind:
    host, v6only = NEIGHBOURS[where]
    return Bind(host, port, v6only=v6only)


@pytest.fixture
def port():
    p = port_free_everywhere()
    yield p
    sweep(p)


def configured(port: int, autodiscover: bool = True) -> DiscoveryResult:
    cfg = parse_config({"autodiscover": autodiscover, "targets": [{"name": "sim", "match": {"port": port}}]})
    return discover(ProcFS(), cfg)


def in_any_tree(result: DiscoveryResult, pid: int) -> bool:
    return any(p.pid == pid for t in result.targets for p in t.processes)


@pytest.mark.parametrize("where", list(NEIGHBOURS))
def test_the_configured_target_is_the_server_not_an_older_neighbour_on_its_port(port, where):
    with Squatter([neighbour(where, port)], claim=claims(port)) as squatter:
        sim = SimServer(port=port, startup_delay=0.2).start()
        try:
            sim.wait_ready(60)
            result = configured(port)
            target = result.target("sim")
            assert target is not None, result.unmatched
            assert (target.key.pid, target.api_url, target.socket) == (sim.pid, f"http://127.0.0.1:{port}", "")
            assert target.other_listeners == 1
            assert not in_any_tree(result, squatter.pid)
            assert squatter.pid in [k.pid for k, _ in result.ignored]  # its argv's claim is reported, not followed
        finally:
            sim.stop()


@pytest.mark.parametrize("where", list(NEIGHBOURS))
def test_autodiscovery_follows_the_server_not_an_older_neighbour_whose_argv_names_the_port(port, where):
    with Squatter([neighbour(where, port)], claim=claims(port)) as squatter:
        sim = SimServer(port=port, startup_delay=0.2).start()
        try:
            sim.wait_ready(60)
            result = discover(ProcFS(), parse_config({"autodiscover": True}))
            mine = [t for t in result.targets if t.port == port]
            assert [(t.key.pid, t.socket) for t in mine] == [(sim.pid, "owned")]
            assert not in_any_tree(result, squatter.pid)
            (why,) = [w for k, w in result.ignored if k.pid == squatter.pid]
            assert f"served by pid {sim.pid}" in why
        finally:
            sim.stop()


def test_before_the_server_listens_an_ipv6_only_neighbour_is_no_target(port):
    """The window of E1: the server is still loading; the kernel says (sock_diag) the [::] socket is
    IPV6_V6ONLY, so nothing serves 127.0.0.1 yet: the target is not found, and says why."""
    with Squatter([Bind("::", port, v6only=True)], claim=claims(port)) as squatter:
        result = configured(port)
        assert result.target("sim") is None and not in_any_tree(result, squatter.pid)
        ((name, why),) = [u for u in result.unmatched if u[0] == "sim"]
        assert f"no socket serves 127.0.0.1:{port}" in why


def test_a_dual_stack_neighbour_does_serve_the_ipv4_url_and_is_taken_as_verified(port):
    """The contrast: ``[::]:P`` without IPV6_V6ONLY answers 127.0.0.1:P (the kernel routes it there),
    so it is what the URL reaches; the flag is the kernel's word, not assumed."""
    with Squatter([Bind("::", port, v6only=False)]) as listener:
        target = configured(port, autodiscover=False).target("sim")
        assert target is not None and (target.key.pid, target.socket, target.port_verified) == (listener.pid, "", True)


def test_a_neighbour_sharing_the_servers_address_by_so_reuseport_makes_the_target_ambiguous(port):
    """vLLM's API-server launcher binds with SO_REUSEPORT; a process of the same user may join the
    group and take some of the connections. Two trees serve the address: none is acted on."""
    sim = SimServer(port=port, startup_delay=0.2, extra_args=("--api-server-count", "2")).start()
    try:
        sim.wait_ready(60)
        with Squatter([Bind("127.0.0.1", port, reuseport=True)]) as squatter:
            result = configured(port, autodiscover=False)
            assert result.target("sim") is None
            ((_, why),) = result.unmatched
            assert why.startswith("ambiguous: ") and str(squatter.pid) in why and "SO_REUSEPORT" in why
            assert not in_any_tree(result, squatter.pid)
    finally:
        sim.stop()

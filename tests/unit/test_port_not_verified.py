"""A target whose claim on its port is not verified says why, in the remediation refusal and in
``guardian status``: its sockets unreadable (matched by its argv), or its URL served only through an
IPv6 ``[::]`` socket whose ``IPV6_V6ONLY`` flag the kernel did not say (``socket: assumed``). And
the sockets on its port that do not serve its URL are shown."""

from __future__ import annotations

import pytest

from vllm_guardian.discovery.argv import NOT_VERIFIED, V6ONLY_UNKNOWN, not_verified
from vllm_guardian.model import ProcKey, Target
from vllm_guardian.surface.status_render import render_status
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from tests.unit.test_exporter import status, target


@pytest.mark.parametrize(
    "socket, verified, why",
    [
        ("argv", False, NOT_VERIFIED),
        ("unverified", False, NOT_VERIFIED),
        ("assumed", False, V6ONLY_UNKNOWN),
        ("owned", True, None),
        ("", True, None),
    ],
)
def test_which_claims_are_verified_and_why_not(socket, verified, why):
    t = Target("llm", ProcKey(100, 1), (), port=8000, socket=socket)
    assert t.port_verified is verified
    if why is not None:
        assert not_verified(socket) == why


def test_status_says_an_assumed_port_is_not_verified_and_counts_the_other_sockets():
    doc = status(targets=[target(socket="assumed", port_verified=False, other_listeners=2)])
    table = render_status(StatusSnapshot.from_dict(doc))
    assert "port 8000 not verified: its URL is served only by an IPv6 [::] socket" in table
    assert "port 8000: 2 other socket(s) listen there, not serving http://127.0.0.1:8000" in table

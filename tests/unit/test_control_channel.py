"""Control messages (drain, undrain on ``guardian:control``): stamped and signed going out; with trust
keys, every message on the channel checked, counted by outcome, each drop reason logged once per
episode, none acted on."""

from __future__ import annotations

import json
import logging

import pytest

from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.gates.control import OUTCOMES, ControlChannel
from vllm_guardian.gates.trust import KeyRing, Keys, check, sign
from vllm_guardian.remediation.settings import control_message

NOW = 1767225600.0
KEYS = Keys({"gw": b"0123456789abcdef0123"}, "gw")
FORGER = Keys({"gw": b"not-the-secret-0123"}, "gw")
LOG = logging.getLogger("test.control")


def channel(keys: Keys = KEYS, started: float = NOW - 3600, node: str = "node-a") -> ControlChannel:
    return ControlChannel(node, KeyRing.fixed(keys), TrustConfig(), LOG, lambda: NOW, started=started)


def peer(**kw) -> dict:
    """A drain from another guardian (node-b), as its ``stamp`` makes it."""
    m = {
        "action": "drain",
        "target": "llm",
        "node": "node-b",
        "reason": "busy_loop",
        "timestamp": int(NOW),
        "id": "1" * 16,
    }
    m.update(kw)
    return m


def send(c: ControlChannel, msg: dict | str | bytes, wall: float = NOW) -> str:
    return c.accept(msg if isinstance(msg, (str, bytes)) else json.dumps(msg), 0.0, wall)


def test_a_control_message_goes_out_stamped_and_signed_so_a_consumer_can_verify_it():
    msg = channel().stamp(control_message("drain", "llm", "node-a", "busy_loop"))
    assert check(msg, KEYS) is None and check(msg, FORGER) is not None
    assert (msg["action"], msg["target"], msg["node"], msg["timestamp"]) == ("drain", "llm", "node-a", int(NOW))
    assert len(msg["id"]) == 16 and channel().stamp(control_message("drain", "llm", "node-a"))["id"] != msg["id"]


def test_without_keys_a_control_message_is_stamped_not_signed():
    msg = channel(Keys()).stamp(control_message("undrain", "llm", "node-a"))
    assert "sig" not in msg and {"timestamp", "id"} <= set(msg)


@pytest.mark.parametrize(
    "msg, wall, outcome",
    [
        (sign(peer(), KEYS), NOW, "accepted"),
        (peer(), NOW, "unsigned"),  # a forged drain: anyone who can PUBLISH on the Redis
        (sign(peer(), FORGER), NOW, "bad_signature"),
        (dict(sign(peer(), KEYS), action="undrain"), NOW, "bad_signature"),  # altered after signing
        (sign(peer(timestamp=int(NOW) + 31), KEYS), NOW, "future"),
        (sign(peer(timestamp=int(NOW) - 601), KEYS), NOW, "stale"),
        (sign(peer(node="node-a"), KEYS), NOW, "not_ours"),  # speaks for this node, never sent by it
        (sign(peer(id=None), KEYS), NOW, "malformed"),
        (sign(peer(timestamp="soon"), KEYS), NOW, "malformed"),
        ("[" * 5000, NOW, "malformed"),
        ("x" * 20_000, NOW, "malformed"),
        (b"\xff\xfe", NOW, "malformed"),
    ],
    ids=[
        "peer",
        "unsigned",
        "other-key",
        "altered",
        "future",
        "stale",
        "not-ours",
        "no-id",
        "bad-timestamp",
        "deep",
        "huge",
        "not-utf8",
    ],
)
def test_with_keys_each_message_on_the_channel_gets_one_outcome(msg, wall, outcome):
    c = channel()
    assert send(c, msg, wall) == outcome
    assert c.status_section().control_messages == {o: int(o == outcome) for o in OUTCOMES}


def test_the_guardians_own_message_comes_back_as_its_own_once_then_as_a_replay():
    c = channel(started=NOW)  # just started: its own messages are not "before the start"
    mine = c.stamp(control_message("drain", "llm", "node-a", "busy_loop"))
    assert [send(c, mine) for _ in range(3)] == ["own", "replay", "replay"]


def test_a_message_stamped_before_this_guardian_started_is_refused():
    c = channel(started=NOW)
    assert send(c, sign(peer(timestamp=int(NOW) - 10), KEYS)) == "before_start"
    assert send(c, sign(peer(timestamp=int(NOW) + 31, id="2" * 16), KEYS), NOW + 32) == "accepted"


def test_each_drop_reason_is_logged_once_per_episode_and_never_names_a_secret(caplog):
    c = channel()
    with caplog.at_level(logging.WARNING, "test.control"):
        for i in range(200):
            send(c, peer(id=f"{i:016x}"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "control message unsigned" in lines[0] and "0123456789abcdef" not in lines[0]
    assert c.status_section().control_messages["unsigned"] == 200  # type: ignore[index]


def test_the_status_names_the_key_ids_in_force_never_a_secret():
    st = channel().status_section()
    assert (st.kids, st.last_reload) == (("gw",), None)
    assert "0123456789abcdef" not in json.dumps(st.__dict__, default=str)


def test_the_status_table_names_the_key_ids_and_the_control_channels_counts():
    from vllm_guardian.surface.status_render import render_status
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

    c = channel()
    send(c, peer())
    send(c, sign(peer(id="2" * 16), KEYS))
    doc = {"node": "node-a", "trust": json.loads(json.dumps(c.status_section().__dict__))}
    text = render_status(StatusSnapshot.from_dict(doc))
    assert "trust keys: gw (none); control messages: 0 own, 1 accepted, 1 dropped" in text

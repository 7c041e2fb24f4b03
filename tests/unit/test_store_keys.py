"""Fleet-store keys in a Redis Cluster: what one script touches hashes to one slot."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import load_config
from vllm_guardian.errors import ConfigError
from vllm_guardian.policy.breaker import scope_prefix
from vllm_guardian.remediation.lease import FENCE, PREFIX
from vllm_guardian.sinks.group_lease import fence_key, lease_key
from vllm_guardian.sinks.redis_delivery import delivered_key_of
from vllm_guardian.store.keys import beside, hash_tag, slot, stream_problem, tagged


@pytest.mark.parametrize(
    "key, expected",
    [("foo", 12182), ("{user1000}.following", slot("user1000")), ("foo{}{bar}", slot("foo{}{bar}")), ("", 0)],
)
def test_the_slot_is_the_one_redis_computes(key, expected):
    assert slot(key) == expected  # 12182: the CLUSTER KEYSLOT foo of the Redis documentation


@pytest.mark.parametrize(
    "key, tag",
    [("a{b}c", "b"), ("a{}c{d}", "a{}c{d}"), ("{x", "{x"), ("a}b", "a}b"), ("{{b}}", "{b"), ("plain", "plain")],
)
def test_the_hash_tag_follows_the_first_brace_rule(key, tag):
    assert hash_tag(key) == tag


@pytest.mark.parametrize("stream", ["guardian:alerts", "{fleet}:alerts", "alerts{x", "a{b}c{d}"])
def test_a_nodes_delivered_ids_share_the_slot_of_the_stream(stream):
    assert slot(delivered_key_of(stream, "gpu-7")) == slot(stream)


@pytest.mark.parametrize("ident", ["llama-3-70b", "", "}odd", "a}b", "{x}", "모델"])
def test_every_key_of_one_ident_shares_a_slot(ident):
    assert len({slot(tagged("p:", ident, s)) for s in ("", ":restarts", ":targets", ":held", ":fence")}) == 1


def test_the_fleet_lease_slots_and_fence_share_a_slot():
    assert len({slot(f"{PREFIX}{i}") for i in range(8)} | {slot(PREFIX + FENCE)}) == 1


def test_a_breaker_scope_and_a_group_lease_keep_their_keys_together():
    assert slot(scope_prefix("m") + "restarts") == slot(scope_prefix("m") + "held")
    assert slot(lease_key("dp@10.0.0.1:8000")) == slot(fence_key("dp@10.0.0.1:8000"))


def test_a_stream_name_with_a_stray_closing_brace_is_refused_with_its_key(tmp_path):
    assert stream_problem("guardian}alerts") and stream_problem("{a}b") is None
    with pytest.raises(ValueError):
        beside("guardian}alerts", ":x")
    cfg = tmp_path / "g.yaml"
    cfg.write_text("alerts: {stream: 'guardian}alerts'}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert any(p.startswith("alerts.stream: expected a Redis key name") for p in e.value.problems)

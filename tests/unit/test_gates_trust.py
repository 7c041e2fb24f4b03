"""Signed messages: the canonical form any language can produce, the keys, replays and rates."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess

import pytest

from vllm_guardian.errors import ConfigError
from vllm_guardian.gates.trust import KeyRing, Keys, RateLimit, ReplayGuard, canonical, check, load_keys, sign

KEYS = Keys({"k1": b"0123456789abcdef0123", "k0": b"fedcba9876543210fedc"}, "k1")
MSG = {"instance_id": "node-a/t", "request_id": "r1", "timestamp": 1767225600, "check_level": "L3",
       "type": "nan", "details": {"output": "¡ñ!", "b": [1, 2]}}  # fmt: skip


def test_the_canonical_form_is_sorted_compact_utf8_json_without_sig():
    body = canonical(dict(MSG, sig="ff", kid="k1"))
    assert (
        body
        == (
            '{"check_level":"L3","details":{"b":[1,2],"output":"¡ñ!"},"instance_id":"node-a/t",'
            '"kid":"k1","request_id":"r1","timestamp":1767225600,"type":"nan"}'
        ).encode()
    )


def test_a_signed_message_is_the_hmac_sha256_hex_of_its_canonical_form():
    signed = sign(MSG, KEYS)
    assert signed["kid"] == "k1"
    want = hmac.new(b"0123456789abcdef0123", canonical(signed), hashlib.sha256).hexdigest()
    assert signed["sig"] == want and check(signed, KEYS) is None


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda m: {k: v for k, v in m.items() if k != "sig"}, "unsigned"),
        (lambda m: {k: v for k, v in m.items() if k != "kid"}, "unsigned"),
        (lambda m: dict(m, kid="nobody"), "bad_signature"),
        (lambda m: dict(m, sig=m["sig"].upper()), "bad_signature"),
        (lambda m: dict(m, sig=123), "bad_signature"),
        (lambda m: dict(m, check_level="L1"), "bad_signature"),  # a field changed after signing
        (lambda m: dict(m, details={"output": "¡ñ!", "b": [1, 2, 3]}), "bad_signature"),
        (lambda m: dict(m, timestamp=float("nan")), "bad_signature"),  # not canonical JSON: no crash
    ],
)
def test_a_message_not_signed_by_a_known_key_is_refused_naming_why(change, reason):
    got = check(change(sign(MSG, KEYS)), KEYS)
    assert got is not None and got[0] == reason


def test_every_key_verifies_and_the_first_signs_so_keys_rotate():
    old = Keys({"k0": KEYS.secrets["k0"]}, "k0")
    assert check(sign(MSG, old), KEYS) is None  # a gateway still on the old key is accepted meanwhile


@pytest.mark.skipif(not (shutil.which("openssl") and shutil.which("jq")), reason="needs openssl and jq")
def test_the_shell_recipe_of_the_docs_signs_what_the_guardian_verifies():
    """The few lines of docs/gates.md (Trust) that sign a report without Python."""
    script = r"""
    msg='{"instance_id":"node-a/t","request_id":"r1","timestamp":1767225600,"check_level":"L3","type":"nan","details":{"output":"¡ñ!","b":[1,2]}}'
    body=$(printf '%s' "$msg" | jq -cS --arg kid "$KID" '. + {kid: $kid}')
    sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}')
    printf '%s' "$body" | jq -c --arg sig "$sig" '. + {sig: $sig}'
    """
    env = dict(os.environ, KID="k1", SECRET="0123456789abcdef0123")
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert check(json.loads(out), KEYS) is None


# ---------------------------------------------------------------- keys
def write_keys(tmp_path, text: str, mode: int = 0o600):
    p = tmp_path / "trust.keys"
    p.write_text(text)
    os.chmod(p, mode)
    return str(p)


def test_keys_come_from_a_0600_file_first_line_signing(tmp_path):
    path = write_keys(tmp_path, "# rotate: new key first\nk2 aaaaaaaaaaaaaaaaaaaa\nk1 bbbbbbbbbbbbbbbbbbbb\n")
    keys = load_keys(path, None)
    assert keys.signer == "k2" and set(keys.secrets) == {"k1", "k2"} and keys.enabled


def test_a_key_from_the_environment_has_kid_default():
    keys = load_keys(None, "GW_KEY", {"GW_KEY": "cccccccccccccccccccc\n"})
    assert keys.signer == "default" and keys.secrets["default"] == b"cccccccccccccccccccc"


def test_no_key_configured_is_no_trust():
    assert not load_keys(None, None).enabled


@pytest.mark.parametrize(
    "text, mode, error",
    [
        ("k1 aaaaaaaaaaaaaaaaaaaa\n", 0o644, "must be 0600"),
        ("k1 aaaaaaaaaaaaaaaaaaaa\n", 0o640, "must be 0600"),
        ("k1 short\n", 0o600, "shorter than 16"),
        ("k1\n", 0o600, "expected `kid secret`"),
        ("k1 aaaaaaaaaaaaaaaaaaaa\nk1 bbbbbbbbbbbbbbbbbbbb\n", 0o600, "appears twice"),
        ("# nothing\n", 0o600, "no `kid secret` line"),
        ("bad/kid aaaaaaaaaaaaaaaaaaaa\n", 0o600, "key id must be"),
    ],
)
def test_a_bad_keys_file_is_a_config_error_naming_the_problem(tmp_path, text, mode, error):
    with pytest.raises(ConfigError, match=error):
        load_keys(write_keys(tmp_path, text, mode), None)


def test_a_missing_keys_file_or_variable_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot open"):
        load_keys(str(tmp_path / "absent"), None)
    with pytest.raises(ConfigError, match="not set"):
        load_keys(None, "ABSENT_VAR", {})
    with pytest.raises(ConfigError, match="not both"):
        load_keys(str(tmp_path / "x"), "V", {"V": "x" * 20})


# ---------------------------------------------------------------- replay, rate
def test_a_request_id_counts_once_per_instance_within_the_window():
    g = ReplayGuard(window=60.0)
    assert not g.seen_before("n/t", "r1", 100.0)
    assert g.seen_before("n/t", "r1", 130.0)
    assert not g.seen_before("n/other", "r1", 130.0)
    assert not g.seen_before("n/t", "r1", 200.0)  # past the window (the report itself is stale by then)


def test_the_replay_guard_is_bounded():
    g = ReplayGuard(window=1e9, capacity=100)
    for i in range(10_000):
        g.seen_before("n/t", f"r{i}", 1.0)
    assert len(g) <= 100


def test_the_rate_limit_lets_a_burst_through_then_one_token_at_a_time():
    r = RateLimit(per_minute=30)
    assert sum(r.take("t", 0.0) for _ in range(100)) == 30
    assert not r.take("t", 1.0) and r.take("t", 2.1)  # 0.5 token a second
    assert r.take("other", 2.1)  # per target


def test_a_keys_file_mounted_from_a_kubernetes_secret_is_read_through_its_symlink(tmp_path):
    """A Secret volume holds `trust.keys -> ..data/trust.keys`, mode 0400 (defaultMode 0400)."""
    (tmp_path / "..data").mkdir()
    real = tmp_path / "..data" / "trust.keys"
    real.write_text("gw aaaaaaaaaaaaaaaaaaaa\n")
    os.chmod(real, 0o400)
    (tmp_path / "trust.keys").symlink_to("..data/trust.keys")
    assert load_keys(str(tmp_path / "trust.keys"), None).signer == "gw"


# ---------------------------------------------------------------- the keys in force, reloaded (E5)
OLD, NEW = "old-secret-0123456789", "new-secret-0123456789"


def test_a_key_removed_from_the_file_no_longer_verifies_after_a_reload(tmp_path):
    path = write_keys(tmp_path, f"new {NEW}\nold {OLD}\n")
    ring = KeyRing(path, None)
    by_old = sign(MSG, Keys({"old": OLD.encode()}, "old"))
    assert check(by_old, ring.current) is None
    write_keys(tmp_path, f"new {NEW}\n")
    out = ring.reload()
    assert (out.ok, out.kids, out.added, out.removed) == (True, ("new",), (), ("old",))
    assert check(by_old, ring.current) == ("bad_signature", "unknown kid 'old'")


@pytest.mark.parametrize(
    "text, mode, problem",
    [
        ("new new-secret-0123456789\n", 0o644, "must be 0600"),
        ("garbage\n", 0o600, "expected `kid secret`"),
        ("# every key removed\n", 0o600, "no `kid secret` line"),
    ],
    ids=["readable-by-others", "malformed", "empty"],
)
def test_a_keys_file_that_no_longer_loads_keeps_the_keys_in_force_and_says_why(tmp_path, text, mode, problem):
    path = write_keys(tmp_path, f"old {OLD}\n")
    ring = KeyRing(path, None)
    write_keys(tmp_path, text, mode)
    out = ring.reload()
    assert not out.ok and problem in (out.problem or "") and ring.current.kids == ("old",)
    assert out.summary().startswith("trust keys refused, the running keys are kept (kids old)")


def test_what_a_reload_says_names_key_ids_never_a_secret(tmp_path):
    path = write_keys(tmp_path, f"old {OLD}\n")
    ring = KeyRing(path, None)
    write_keys(tmp_path, f"new {NEW}\nold {OLD}\n")
    said = ring.reload().summary()
    assert said == "trust keys kids new, old (added new)"
    assert OLD not in said and NEW not in said and ring.reload().summary() == "trust keys kids new, old, unchanged"


def test_keys_without_a_source_are_kept_by_a_reload():
    ring = KeyRing.fixed(KEYS)
    assert ring.reload().ok and ring.current is KEYS


def test_a_fifo_in_place_of_the_keys_file_is_refused_at_once_not_waited_on(tmp_path):
    path = tmp_path / "trust.keys"
    os.mkfifo(path, 0o600)  # no writer will ever come: a blocking open would hang the reload for good
    with pytest.raises(ConfigError, match="not a regular file"):
        load_keys(str(path), None)


def test_a_key_removed_by_a_reload_is_still_a_secret_to_scrub(tmp_path):
    path = write_keys(tmp_path, f"new {NEW}\nold {OLD}\n")
    ring = KeyRing(path, None)
    write_keys(tmp_path, f"new {NEW}\n")
    ring.reload()
    assert set(ring.secrets()) == {NEW.encode(), OLD.encode()} and ring.current.kids == ("new",)

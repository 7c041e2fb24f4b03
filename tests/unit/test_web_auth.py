"""Basic auth of the HTTP listener (surface/web_auth.py) with real bcrypt hashes (cost 4): the
verdict for each kind of header, a verified password remembered (no second bcrypt round) but
never a wrong one, the memory bounded, one bcrypt round at a time with a wait bounded by the
request's deadline and a bounded queue, and an unknown user costing the same round as a known one."""

from __future__ import annotations

import base64
import threading
import time

import bcrypt
import pytest

from tests.support.certs import bcrypt_hash
from vllm_guardian.surface.web_auth import MAX_PASSWORD, BasicAuth, Verdict, parse_basic

USERS = {"prom": bcrypt_hash("s3cret"), "ops": bcrypt_hash("other")}
FAR = float("inf")  # a deadline that never comes


def basic(user: str, password: str | bytes) -> str:
    pw = password if isinstance(password, bytes) else password.encode()
    return "Basic " + base64.b64encode(user.encode() + b":" + pw).decode()


class Counted:
    """bcrypt.checkpw, counted: how many rounds a request really cost."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls += 1
        return bcrypt.checkpw(password, hashed)


@pytest.mark.parametrize(
    "header, verdict",
    [
        (None, Verdict.NO_CREDENTIALS),
        ("", Verdict.NO_CREDENTIALS),
        ("Bearer abc", Verdict.NO_CREDENTIALS),
        (basic("prom", "s3cret"), Verdict.OK),
        ("basic " + basic("prom", "s3cret")[6:], Verdict.OK),  # the scheme is case-insensitive
        (basic("prom", "S3cret"), Verdict.BAD_CREDENTIALS),
        (basic("ops", "s3cret"), Verdict.BAD_CREDENTIALS),  # another user's password
        (basic("nobody", "s3cret"), Verdict.BAD_CREDENTIALS),
        (basic("prom", ""), Verdict.BAD_CREDENTIALS),
        ("Basic !!!", Verdict.BAD_CREDENTIALS),
        ("Basic " + base64.b64encode(b"no-colon").decode(), Verdict.BAD_CREDENTIALS),
        ("Basic " + base64.b64encode(b"\xff\xfe:x").decode(), Verdict.BAD_CREDENTIALS),
        ("Basic " + "A" * 2000, Verdict.BAD_CREDENTIALS),
        (basic("prom", b"s3cret" + b"x" * MAX_PASSWORD), Verdict.BAD_CREDENTIALS),
    ],
)
def test_the_verdict_on_an_authorization_header(header, verdict):
    assert BasicAuth(USERS).check(header, FAR) is verdict


@pytest.mark.parametrize(
    "header, expected",
    [
        (basic("prom", "a:b"), ("prom", b"a:b")),  # the first ':' splits, the password may hold more
        ("Basic " + base64.b64encode(b":").decode(), ("", b"")),
        ("Digest abc", None),
        ("Basic", None),
    ],
)
def test_parse_basic(header, expected):
    assert parse_basic(header) == expected


def test_a_password_longer_than_bcrypt_reads_is_refused_without_a_round():
    checkpw = Counted()
    auth = BasicAuth(USERS, checkpw=checkpw)
    assert auth.check(basic("prom", b"s3cret" + b"\0" * 80), FAR) is Verdict.BAD_CREDENTIALS
    assert checkpw.calls == 0


def test_a_verified_password_costs_one_round_however_often_it_comes():
    checkpw = Counted()
    auth = BasicAuth(USERS, checkpw=checkpw)
    assert [auth.check(basic("prom", "s3cret"), FAR) for _ in range(5)] == [Verdict.OK] * 5
    assert (checkpw.calls, auth.rounds) == (1, 1)


def test_a_wrong_password_is_never_remembered():
    checkpw = Counted()
    auth = BasicAuth(USERS, checkpw=checkpw)
    for _ in range(3):
        assert auth.check(basic("prom", "guess"), FAR) is Verdict.BAD_CREDENTIALS
    assert checkpw.calls == 3


def test_an_unknown_user_costs_a_round_like_a_known_one():
    checkpw = Counted()
    auth = BasicAuth(USERS, checkpw=checkpw)
    auth.check(basic("nobody", "s3cret"), FAR)
    assert checkpw.calls == 1


def test_the_memory_of_verified_passwords_is_bounded_least_recently_used_first():
    users = {f"u{i}": bcrypt_hash(f"p{i}") for i in range(3)}
    checkpw = Counted()
    auth = BasicAuth(users, checkpw=checkpw, max_cached=2)
    for i in (0, 1, 0, 2):  # u1 is the least recently used when u2 comes
        auth.check(basic(f"u{i}", f"p{i}"), FAR)
    calls = checkpw.calls
    auth.check(basic("u0", "p0"), FAR)
    auth.check(basic("u2", "p2"), FAR)
    assert checkpw.calls == calls  # both still remembered
    auth.check(basic("u1", "p1"), FAR)
    assert checkpw.calls == calls + 1  # forgotten: verified again


def test_a_check_waiting_past_its_deadline_for_the_bcrypt_turn_is_busy():
    entered, release = threading.Event(), threading.Event()

    def slow(password: bytes, hashed: bytes) -> bool:
        entered.set()
        release.wait(10)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth(USERS, checkpw=slow)
    first = threading.Thread(target=auth.check, args=(basic("prom", "guess"), FAR))
    first.start()
    try:
        assert entered.wait(10)
        assert auth.check(basic("ops", "other"), time.monotonic() + 0.05) is Verdict.BUSY
    finally:
        release.set()
        first.join(10)
    assert auth.check(basic("ops", "other"), FAR) is Verdict.OK  # its turn came


def test_past_the_queue_a_check_is_busy_at_once_and_a_remembered_password_still_passes():
    slow_now, entered, release = threading.Event(), threading.Event(), threading.Event()

    def checkpw(password: bytes, hashed: bytes) -> bool:
        if slow_now.is_set():
            entered.set()
            release.wait(10)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth(USERS, checkpw=checkpw, max_queued=1)
    assert auth.check(basic("prom", "s3cret"), FAR) is Verdict.OK  # verified before the flood
    slow_now.set()
    guess = threading.Thread(target=auth.check, args=(basic("ops", "guess"), FAR))
    guess.start()
    try:
        assert entered.wait(10)  # the one queue place is taken
        assert auth.check(basic("ops", "guess-more"), FAR) is Verdict.BUSY  # not queued: answered now
        assert auth.check(basic("prom", "s3cret"), FAR) is Verdict.OK  # needs no bcrypt round
    finally:
        release.set()
        guess.join(10)


def test_a_new_user_set_trusts_nothing_verified_under_the_old_one():
    old = BasicAuth({"prom": bcrypt_hash("s3cret")})
    assert old.check(basic("prom", "s3cret"), FAR) is Verdict.OK
    new = BasicAuth({"prom": bcrypt_hash("changed")})
    assert new.check(basic("prom", "s3cret"), FAR) is Verdict.BAD_CREDENTIALS

"""Basic authentication of the HTTP listener against the web config's bcrypt hashes
(``basic_auth_users``), the way Prometheus' exporter-toolkit does it.

Decides: whether an ``Authorization`` header names a configured user with the right password.

- The password is checked with bcrypt (constant time), one check at a time (each one costs
  tens of milliseconds of CPU), with at most ``MAX_QUEUED`` requests running or waiting for
  one: a request beyond them, or one whose turn does not come before its own deadline, is
  answered ``BUSY`` (503) at once. A flood of wrong passwords costs at most one core, holds
  only a few of the listener's connections, and none past its deadline; a scraper whose
  password is remembered (below) never waits behind it.
- A verified (user, hash, password) is remembered so that a scrape every few seconds costs no
  bcrypt round after the first: as an HMAC under a key drawn at start (never the password),
  at most ``MAX_CACHED`` of them, the least recently used dropped. Only successes are kept: a
  flood of wrong passwords cannot push a good one out. A new user set (a reload) is a new
  ``BasicAuth``: nothing verified under the old one is trusted.
- An unknown user is checked against a dummy hash of the same cost (made when first needed),
  so the timing of the answer does not say which users exist.
- A header that is not ``Basic <base64 of user:password>``, longer than ``MAX_HEADER``, or a
  password longer than bcrypt's 72 bytes is refused without a bcrypt round.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from enum import Enum
from typing import Callable

import bcrypt

MAX_HEADER = 1024  # "Basic " + base64 of a user and a password of bcrypt's 72 bytes is far below
MAX_PASSWORD = 72  # bcrypt reads no further; a longer password is refused, never truncated
MAX_CACHED = 64  # verified (user, password) pairs: a few scrapers, a person or two
MAX_QUEUED = 4  # requests in or waiting for a bcrypt round; a few of the listener's 16 connections
DEFAULT_COST = 10


class Verdict(str, Enum):
    """The answer to one request's credentials (the metric's ``reason`` label when not OK)."""

    OK = "ok"
    NO_CREDENTIALS = "no_credentials"  # no Authorization header, or not Basic
    BAD_CREDENTIALS = "bad_credentials"  # unknown user, wrong password, malformed header
    BUSY = "busy"  # its bcrypt check could not start before the request's deadline


def parse_basic(header: str) -> tuple[str, bytes] | None:
    """``(user, password)`` of a ``Basic`` Authorization header value, or None when malformed."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or len(header) > MAX_HEADER:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user_b, sep, password = raw.partition(b":")
        user = user_b.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return (user, password) if sep else None


class BasicAuth:
    """Checks credentials against ``users`` (name -> bcrypt hash). Thread-safe."""

    def __init__(
        self,
        users: Mapping[str, str],
        *,
        checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw,
        monotonic: Callable[[], float] = time.monotonic,
        max_cached: int = MAX_CACHED,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self._users = {name: h.encode("ascii") for name, h in users.items()}
        self._checkpw = checkpw
        self._monotonic = monotonic
        self._max_cached = max_cached
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()  # one bcrypt round at a time
        self._queue = threading.BoundedSemaphore(max_queued)  # in or waiting for a round
        self._dummy: bytes | None = None
        self.rounds = 0  # bcrypt checks made (a cached pair costs none)

    def check(self, header: str | None, deadline: float) -> Verdict:
        """The verdict on one request's ``Authorization`` header (None: absent); a bcrypt round
        waits for its turn at most until ``deadline`` (monotonic)."""
        if header is None or not header.strip().lower().startswith("basic"):
            return Verdict.NO_CREDENTIALS
        creds = parse_basic(header)
        if creds is None or len(creds[1]) > MAX_PASSWORD:
            return Verdict.BAD_CREDENTIALS
        user, password = creds
        hashed = self._users.get(user)
        if hashed is not None and self._known(self._digest(user, hashed, password)):
            return Verdict.OK
        if not self._queue.acquire(blocking=False):
            return Verdict.BUSY
        try:
            return self._verify(user, hashed, password, deadline)
        finally:
            self._queue.release()

    def _verify(self, user: str, hashed: bytes | None, password: bytes, deadline: float) -> Verdict:
        """One bcrypt round, when its turn comes before ``deadline``."""
        wait = min(max(0.0, deadline - self._monotonic()), threading.TIMEOUT_MAX)
        if not self._bcrypt_lock.acquire(timeout=wait):
            return Verdict.BUSY
        try:
            if hashed is None:  # the same work as for a real user: the timing does not tell who exists
                self._checkpw(password, self._dummy_hash())
                return Verdict.BAD_CREDENTIALS
            digest = self._digest(user, hashed, password)
            if self._known(digest):  # verified by another request while this one waited
                return Verdict.OK
            self.rounds += 1
            ok = self._checkpw(password, hashed)
        finally:
            self._bcrypt_lock.release()
        if not ok:
            return Verdict.BAD_CREDENTIALS
        self._remember(digest)
        return Verdict.OK

    def _digest(self, user: str, hashed: bytes, password: bytes) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + hashed + b"\0" + password, hashlib.sha256).digest()

    def _known(self, digest: bytes) -> bool:
        with self._cache_lock:
            if digest in self._verified:
                self._verified.move_to_end(digest)
                return True
            return False

    def _remember(self, digest: bytes) -> None:
        with self._cache_lock:
            self._verified[digest] = None
            self._verified.move_to_end(digest)
            while len(self._verified) > self._max_cached:
                self._verified.popitem(last=False)

    def _dummy_hash(self) -> bytes:
        """A hash of a random password at the highest cost configured (under the bcrypt lock)."""
        if self._dummy is None:
            costs = [int(h[4:6]) for h in self._users.values()] or [DEFAULT_COST]
            self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(max(costs)))
        return self._dummy

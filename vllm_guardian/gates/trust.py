"""Signed messages: the keys, the canonical form, signing and checking. Pure except ``load_keys``.

A message that can lead to an action (a report in, a decision out, an L4 fingerprint entry)
carries ``kid`` (key id) and ``sig``: the lowercase hex HMAC-SHA256, under the key ``kid``
names, of the *canonical JSON* of the message without ``sig`` (keys sorted, separators
``,`` and ``:``, UTF-8, non-ASCII characters as they are). Any language can produce it
(docs/gates.md shows a shell and a Go gateway).

Keys never come from the YAML: ``gates.trust.keys_file`` (``kid secret`` per line, ``#``
comments; mode 0600 or stricter is enforced; the first line signs, every line verifies,
so a key rotates by adding the new line first and removing the old one later) or
``gates.trust.key_env`` (one secret, kid ``default``). ``load_keys`` raises
``ConfigError`` naming the problem; with neither set it returns ``Keys()`` (no trust:
external messages may raise an alert, never a restart).

``KeyRing`` holds the keys in force, one per guardian, shared by every part that signs or
checks (reports in, decisions and control messages out, fingerprints both ways): a reload
(``SIGHUP``) re-reads the configured source and swaps the keys for all of them at once, so a
key removed from the file stops verifying; a source that no longer loads keeps the keys in
force and says why. What it tells (log, status) names key ids only, never a secret.

``check`` returns why a message is refused (``unsigned``, ``bad_signature``) or None.
``ReplayGuard`` remembers (instance, request id) pairs within the window, bounded.
``RateLimit`` is a token bucket per name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_guardian.errors import ConfigError

DEFAULT_KID = "default"
MIN_SECRET = 16  # characters; a shorter secret is refused (guessable)
RETIRED_KEPT = 64  # secrets of removed keys the scrubber still knows (a bound on a reload loop)
_KID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")

UNSIGNED = "unsigned"
BAD_SIGNATURE = "bad_signature"


@dataclass(frozen=True)
class Keys:
    """kid -> secret; ``signer`` is the kid that signs (None: no keys, no trust)."""

    secrets: Mapping[str, bytes] = field(default_factory=dict)
    signer: str | None = None
    source: str = "none"

    @property
    def enabled(self) -> bool:
        return self.signer is not None

    @property
    def kids(self) -> tuple[str, ...]:
        """The key ids, signer first (safe to log: no secret)."""
        return tuple(self.secrets)


def canonical(msg: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: ``msg`` without ``sig``, as canonical JSON."""
    body = {k: v for k, v in msg.items() if k != "sig"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def signature(secret: bytes, msg: Mapping[str, Any]) -> str:
    return hmac.new(secret, canonical(msg), hashlib.sha256).hexdigest()


def sign(msg: Mapping[str, Any], keys: Keys) -> dict[str, Any]:
    """``msg`` with ``kid`` and ``sig`` (unchanged, without them, when there are no keys)."""
    out = {k: v for k, v in msg.items() if k not in ("kid", "sig")}
    if keys.signer is None:
        return out
    out["kid"] = keys.signer
    out["sig"] = signature(keys.secrets[keys.signer], out)
    return out


def check(msg: Mapping[str, Any], keys: Keys) -> tuple[str, str] | None:
    """None when ``msg`` is signed by one of ``keys``, else (reason, detail). Never raises."""
    kid, sig = msg.get("kid"), msg.get("sig")
    if kid is None or sig is None:
        return UNSIGNED, "no kid/sig"
    if not isinstance(kid, str) or kid not in keys.secrets:
        return BAD_SIGNATURE, f"unknown kid {str(kid)[:64]!r}"
    if not isinstance(sig, str) or not _HEX.match(sig):
        return BAD_SIGNATURE, "sig is not 64 lowercase hex digits"
    try:
        want = signature(keys.secrets[kid], msg)
    except (TypeError, ValueError) as e:  # a value JSON cannot encode canonically (NaN): not signable
        return BAD_SIGNATURE, f"not canonical JSON: {e}"[:120]
    if not hmac.compare_digest(want, sig):
        return BAD_SIGNATURE, f"signature does not match under kid {kid!r}"
    return None


# ---------------------------------------------------------------- keys
def _parse_keys_file(text: str, where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError([f"{where} line {n}: expected `kid secret`"])
        kid, secret = parts
        if not _KID.match(kid):
            raise ConfigError([f"{where} line {n}: key id must be 1-64 of letters, digits, _ . : -"])
        if len(secret) < MIN_SECRET:
            raise ConfigError([f"{where} line {n}: secret of key {kid!r} shorter than {MIN_SECRET} characters"])
        if kid in out:
            raise ConfigError([f"{where} line {n}: key id {kid!r} appears twice"])
        out[kid] = secret.encode()
    if not out:
        raise ConfigError([f"{where}: no `kid secret` line"])
    return out


def load_keys(keys_file: str | None, key_env: str | None, environ: Mapping[str, str] = os.environ) -> Keys:
    """The trust keys from the configured file or variable; ``ConfigError`` on any problem."""
    if keys_file and key_env:
        raise ConfigError(["gates.trust: set keys_file or key_env, not both"])
    if key_env:
        value = environ.get(key_env, "").strip()
        if not value:
            raise ConfigError([f"gates.trust.key_env: environment variable {key_env} is not set or empty"])
        if len(value) < MIN_SECRET:
            raise ConfigError([f"gates.trust.key_env: the secret in {key_env} is shorter than {MIN_SECRET} characters"])
        return Keys({DEFAULT_KID: value.encode()}, DEFAULT_KID, f"env {key_env}")
    if not keys_file:
        return Keys()
    where = f"gates.trust.keys_file {keys_file}"
    try:
        # a Kubernetes Secret file is a symlink (followed); O_NONBLOCK: a FIFO put in its place
        # cannot hang the start or a reload (it is refused below, not a regular file)
        fd = os.open(keys_file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError([f"{where}: cannot open: {e.strerror}"]) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError([f"{where}: not a regular file"])
        if st.st_mode & 0o077:
            raise ConfigError([f"{where}: mode {stat.S_IMODE(st.st_mode):04o}, must be 0600 or stricter (chmod 600)"])
        raw = os.read(fd, 64 * 1024 + 1)
    finally:
        os.close(fd)
    if len(raw) > 64 * 1024:
        raise ConfigError([f"{where}: larger than 64 KiB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{where}: not UTF-8"]) from None
    secrets = _parse_keys_file(text, where)
    return Keys(secrets, next(iter(secrets)), f"file {keys_file}")


@dataclass(frozen=True)
class KeysReload:
    """What a reload of the trust keys did, in key ids (never a secret)."""

    ok: bool  # False: the source did not load; the keys in force were kept
    kids: tuple[str, ...]  # the key ids in force afterwards
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    problem: str | None = None  # why the source did not load

    def summary(self) -> str:
        if not self.ok:
            return f"trust keys refused, the running keys are kept ({_ids(self.kids)}): {self.problem}"
        changes = [f"{w} {', '.join(ids)}" for w, ids in (("added", self.added), ("removed", self.removed)) if ids]
        return f"trust keys {_ids(self.kids)}" + (f" ({'; '.join(changes)})" if changes else ", unchanged")


def _ids(kids: tuple[str, ...]) -> str:
    return f"kids {', '.join(kids)}" if kids else "none"


class KeyRing:
    """The trust keys in force (``current``), re-read from their configured source by ``reload``.

    Every user reads ``current`` when it signs or checks, never a copy taken at start, so a
    reload applies to all of them at once. ``fixed`` holds keys that have no source (a test,
    a gateway library): ``reload`` keeps them."""

    def __init__(self, keys_file: str | None, key_env: str | None, environ: Mapping[str, str] = os.environ) -> None:
        self.keys_file, self.key_env, self._environ = keys_file, key_env, environ
        self.current: Keys = load_keys(keys_file, key_env, environ)  # ConfigError: not started
        self.last_reload: KeysReload | None = None
        self._retired: OrderedDict[bytes, None] = OrderedDict()  # secrets of keys a reload removed

    @classmethod
    def fixed(cls, keys: Keys | None = None) -> KeyRing:
        ring = cls(None, None)
        ring.current = keys or Keys()
        return ring

    @property
    def enabled(self) -> bool:
        return self.current.enabled

    def secrets(self) -> tuple[bytes, ...]:
        """Every secret held since the start, retired ones included (the last ``RETIRED_KEPT``):
        what the scrubber keeps out of everything the guardian writes (``bundle/known_secrets``)."""
        return (*self.current.secrets.values(), *self._retired)

    def reload(self) -> KeysReload:
        """Re-read the source: the new keys in force, or (``ok`` False) the old ones kept."""
        old = self.current.kids
        if not (self.keys_file or self.key_env):
            out = KeysReload(True, old)
        else:
            try:
                new = load_keys(self.keys_file, self.key_env, self._environ)
            except ConfigError as e:
                out = KeysReload(False, old, problem="; ".join(e.problems))
            else:
                for secret in self.current.secrets.values():
                    if secret not in new.secrets.values():
                        self._retired[secret] = None
                while len(self._retired) > RETIRED_KEPT:
                    self._retired.popitem(last=False)
                self.current = new
                added = tuple(k for k in new.kids if k not in old)
                out = KeysReload(True, new.kids, added, tuple(k for k in old if k not in new.kids))
        self.last_reload = out
        return out


# ---------------------------------------------------------------- replay, rate
class ReplayGuard:
    """(instance, request id) pairs seen in the last ``window`` seconds, at most ``capacity`` of
    them (the oldest go first). With ``window`` = the reports' max age + the allowed skew, a
    pair forgotten here is refused as stale anyway. Thread-safe."""

    def __init__(self, window: float, capacity: int = 20_000) -> None:
        self.window, self.capacity = window, capacity
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def seen_before(self, instance: str, request_id: str, now: float) -> bool:
        """True when the pair was seen already; else remembers it."""
        key = (instance, request_id)
        with self._lock:
            while self._seen:
                first = next(iter(self._seen.values()))
                if now - first <= self.window and len(self._seen) < self.capacity:
                    break
                self._seen.popitem(last=False)
            if key in self._seen:
                return True
            self._seen[key] = now
            return False

    def __len__(self) -> int:
        return len(self._seen)


class RateLimit:
    """A token bucket per name: ``per_minute`` tokens a minute, as many at once. Thread-safe;
    the names must be a bounded set (known targets)."""

    def __init__(self, per_minute: int) -> None:
        self.rate, self.burst = per_minute / 60.0, float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, now: float) -> bool:
        with self._lock:
            tokens, last = self._buckets.get(name, (self.burst, now))
            tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
            ok = tokens >= 1.0
            self._buckets[name] = (tokens - 1.0 if ok else tokens, now)
            return ok

    def forget(self, keep: frozenset[str] | set[str]) -> None:
        with self._lock:
            for name in [n for n in self._buckets if n not in keep]:
                del self._buckets[name]

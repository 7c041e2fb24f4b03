"""Incident ids: unique and lexicographically sortable by time (ULID layout).

48-bit millisecond wall timestamp + 80 random bits, Crockford base32, 26 chars.
``IdGenerator`` additionally keeps ids strictly increasing within one
millisecond (and across a wall clock that steps back), per instance.
"""

from __future__ import annotations

import os
from typing import Callable

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
LENGTH = 26
_TS_MAX = (1 << 48) - 1
_RAND_BITS = 80
_RAND_MAX = (1 << _RAND_BITS) - 1


def encode(value: int) -> str:
    """128-bit integer -> 26 Crockford base32 characters (most significant first)."""
    chars = []
    for _ in range(LENGTH):
        chars.append(ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def decode_ms(incident_id: str) -> int:
    """The millisecond timestamp an id was made at."""
    value = 0
    for ch in incident_id.upper():
        value = (value << 5) | ALPHABET.index(ch)
    return value >> _RAND_BITS


def _compose(ms: int, rand: int) -> str:
    return encode((ms << _RAND_BITS) | rand)


def _ms(wall: float) -> int:
    return min(max(int(wall * 1000), 0), _TS_MAX)


def new_incident_id(wall: float, rand: Callable[[int], bytes] = os.urandom) -> str:
    """A fresh id for an incident opened at wall time ``wall`` (seconds)."""
    return _compose(_ms(wall), int.from_bytes(rand(10), "big") & _RAND_MAX)


class IdGenerator:
    """Monotonic ids: a draw in the same millisecond as the last one (or earlier,
    if the wall clock stepped back) increments the last id's random part."""

    def __init__(self, rand: Callable[[int], bytes] = os.urandom) -> None:
        self._rand = rand
        self._last: tuple[int, int] | None = None

    def __call__(self, wall: float) -> str:
        ms = _ms(wall)
        rand = int.from_bytes(self._rand(10), "big") & _RAND_MAX
        if self._last is not None and ms <= self._last[0]:
            last_ms, last_rand = self._last
            ms, rand = (last_ms, last_rand + 1) if last_rand < _RAND_MAX else (last_ms + 1, 0)
        self._last = (ms, rand)
        return _compose(ms, rand)

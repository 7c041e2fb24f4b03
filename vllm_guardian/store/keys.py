"""Where the guardian's fleet-store keys live in a Redis Cluster: hash tags, so that what one Lua
script or one multi-key command touches lies in one slot (else the Cluster answers CROSSSLOT).

Pure. Redis hashes a key's *hash tag* when it has one (the text between the first ``{`` and the
first ``}`` after it, when not empty), else the whole key (``hash_tag``, ``slot``). The keys that
must share a slot:

- the alerts stream and a node's delivered-id set (one script): ``beside(stream, ":delivered:<node>")``
  is ``{<stream>}:delivered:<node>``, in the stream's slot whatever the stream is called;
- the fleet lease's slots and its fence counter (one script): ``guardian:lease:{restart}:<i>`` and
  ``guardian:lease:{restart}:fence``;
- a breaker scope's sets (one script): ``guardian:breaker:{<scope>}:restarts|targets|held|paged``;
- a group lease and its fence counter (one script): ``guardian:group-lease:{<group>}`` and
  ``guardian:group-lease:{<group>}:fence``.

Heartbeats, group records and L4 fingerprint hashes are one key per command: untagged, spread over
the Cluster. ``stream_problem`` says why a configured stream name could not have a slot mate.
"""

from __future__ import annotations

import binascii
import hashlib

SLOTS = 16384


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis hashes: its hash tag, or the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def slot(key: str) -> int:
    """The Cluster slot of ``key`` (CRC16/XMODEM of its hash tag, mod 16384), as Redis computes it."""
    return binascii.crc_hqx(hash_tag(key).encode("utf-8"), 0) % SLOTS


def stream_problem(key: str) -> str | None:
    """Why no key can be made to share ``key``'s slot (a ``}`` outside a hash tag), or None."""
    if "}" in hash_tag(key):
        return "a '}' outside a {hash tag}: no key could share its Cluster slot"
    return None


def beside(key: str, suffix: str) -> str:
    """A key named ``{<tag>}<suffix>`` in the same Cluster slot as ``key``."""
    tag = hash_tag(key)
    if "}" in tag:
        raise ValueError(f"{key!r}: {stream_problem(key)}")
    return f"{{{tag}}}{suffix}"


def tagged(prefix: str, ident: str, suffix: str = "") -> str:
    """``<prefix>{<ident>}<suffix>``: every suffix of one ident in one slot. An ident that would
    make no tag (empty, or starting with ``}``) is tagged by its digest instead."""
    if not ident or ident.startswith("}"):
        ident = "#" + hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{prefix}{{{ident}}}{suffix}"

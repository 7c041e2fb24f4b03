"""vLLM version strings compared as PEP 440 says (``packaging.version``, the standard's own library).

``parse_version("0.11.1rc2.dev5+gabc")`` → a ``Version`` that orders as pip does:
``0.6.3.dev1 < 0.6.3rc1 < 0.6.3 < 0.6.3.post1 < 0.6.4``; a local tag (``+cu124``) sorts after the
same release without one. A leading ``v`` is accepted (``v0.6.3``), as vLLM's tags write it.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def parse_version(text: str) -> Version:
    """A comparable version; ``ValueError`` when the text is not a PEP 440 version."""
    try:
        return Version((text or "").strip())
    except InvalidVersion:
        raise ValueError(f"not a version: {text!r}") from None


def version_lt(a: str, b: str) -> bool:
    return parse_version(a) < parse_version(b)


def is_version(text: str) -> bool:
    try:
        parse_version(text)
    except ValueError:
        return False
    return True

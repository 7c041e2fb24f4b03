"""vLLM version strings compared without third-party packages (pure).

``parse_version("0.11.1rc2.dev5+gabc")`` → a tuple that orders releases the way
PEP 440 does for the cases vLLM publishes: numeric release, then pre-releases
(``dev`` < ``rc``/``a``/``b`` < final), local build tags ignored.
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"^\s*v?(?P<nums>\d+(?:\.\d+)*)(?P<rest>.*)$")
_PRE = re.compile(r"(?P<tag>a|b|rc|dev)\.?(?P<n>\d*)", re.IGNORECASE)
_ORDER = {"dev": 0, "a": 1, "b": 2, "rc": 3}


def parse_version(text: str) -> tuple:
    """A sortable key; ``ValueError`` when the text does not start with a release number."""
    m = _RELEASE.match(text or "")
    if not m:
        raise ValueError(f"not a version: {text!r}")
    nums = [int(x) for x in m.group("nums").split(".")]
    while len(nums) < 3:
        nums.append(0)
    rest = m.group("rest").split("+", 1)[0]
    pre = _PRE.search(rest)
    stage = (_ORDER[pre.group("tag").lower()], int(pre.group("n") or 0)) if pre else (9, 0)
    return (tuple(nums), stage)


def version_lt(a: str, b: str) -> bool:
    return parse_version(a) < parse_version(b)


def is_version(text: str) -> bool:
    try:
        parse_version(text)
    except ValueError:
        return False
    return True

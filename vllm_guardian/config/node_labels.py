"""This node's labels as the policy profiles match them (docs/policy.md, Profiles): the config's
top-level ``node_labels`` (the operator's words for this node). Checked like Kubernetes labels —
a key ``[prefix/]name`` (a DNS subdomain prefix, a name of at most 63 letters, digits, ``-_.``), a
value of at most 63 of those, at most ``MAX_LABELS`` of them — so a profile written for a Node's
labels reads the same here. Pure: the mapping in, its problems (with their key paths) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LABELS = 64
_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


def key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or _PREFIX.fullmatch(prefix) is None):
        return False
    return len(name) <= 63 and _NAME.fullmatch(name) is not None


def value_ok(value: str) -> bool:
    return len(value) <= 63 and _VALUE.fullmatch(value) is not None


def problems(labels: Mapping[str, str], path: str = "node_labels") -> list[str]:
    """What is wrong with ``labels``, one line per label, each with its key path."""
    out = []
    if len(labels) > MAX_LABELS:
        out.append(f"{path}: at most {MAX_LABELS} labels, got {len(labels)}")
    for key, value in labels.items():
        if not isinstance(value, str):
            continue  # already refused by the walk ("expected a string")
        shown = key if len(key) <= 40 else key[:37] + "..."
        if not key_ok(key):
            out.append(
                f"{path}.{shown}: expected a label key ([prefix/]name: a DNS subdomain, a name of at most 63 "
                "letters, digits, '-_.')"
            )
        elif not value_ok(value):
            out.append(
                f"{path}.{shown}: expected a label value (at most 63 letters, digits, '-_.'), got {value[:70]!r}"
            )
    return out

"""The guardian's own ``NoSchedule`` taint on its Node (opt-in: ``kubernetes.taint_on_device_fault``).

Pure: given the Node's current ``spec.taints``, the list to write, or None when nothing is to be
written. The guardian's taint is ``<taint_key>=vllm-guardian:NoSchedule``; the value marks it as
the guardian's. Adding keeps every other taint and adds nothing when a taint with the same key
and effect is already there (an operator's, or ours from before). Removing takes away only a taint
with our key, effect *and* value: a taint an operator set under the same key with another value —
or any other taint — survives.
"""

from __future__ import annotations

from typing import Any

EFFECT = "NoSchedule"
VALUE = "vllm-guardian"


def ours(taint: Any, key: str) -> bool:
    return (
        isinstance(taint, dict)
        and taint.get("key") == key
        and taint.get("effect") == EFFECT
        and taint.get("value") == VALUE
    )


def with_taint(taints: list[Any], key: str) -> list[Any] | None:
    """``taints`` plus ours, or None when one with this key and effect is already set."""
    if any(isinstance(t, dict) and t.get("key") == key and t.get("effect") == EFFECT for t in taints):
        return None
    return [*taints, {"key": key, "value": VALUE, "effect": EFFECT}]


def without_taint(taints: list[Any], key: str) -> list[Any] | None:
    """``taints`` less ours, or None when ours is not there (nothing of anyone else's is touched)."""
    kept = [t for t in taints if not ours(t, key)]
    return None if len(kept) == len(taints) else kept


def node_taints(node: dict[str, Any]) -> tuple[str, list[Any]]:
    """(resourceVersion, spec.taints) of a Node object as the API server returns it."""
    rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
    taints = (node.get("spec") or {}).get("taints") or []
    if not rv or not isinstance(taints, list):
        raise ValueError("the Node has no metadata.resourceVersion or a spec.taints that is not a list")
    return rv, list(taints)

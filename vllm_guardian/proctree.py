"""The process tree, walked one way: children by parent, and a tree's members root first. Pure.

Discovery (``discovery/scan.py``: a target's tree from one pass over /proc), ``guardian snapshot
<pid>`` (``bundle/pid_target.py``), the per-rank engine trees (``detectors/ranks.py``) and the
simulator's process lookups (``sim/control.py``) each read the parent links their own way and
walk them here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence


def children_by_parent(links: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    """``(pid, ppid)`` pairs -> ppid: its children's pids, ascending. A pid that names itself as
    its parent is no child (pid 0 and the kernel's threads do)."""
    out: dict[int, list[int]] = {}
    for pid, ppid in links:
        if pid != ppid:
            out.setdefault(ppid, []).append(pid)
    for kids in out.values():
        kids.sort()
    return out


def walk(root: int, children: Mapping[int, Sequence[int]] | Callable[[int], Iterable[int]]) -> list[int]:
    """``root`` first, then every descendant breadth-first, each once (a loop in the links ends the walk).
    ``children``: a map from ``children_by_parent``, or a function reading one process's children."""
    kids_of = children if callable(children) else (lambda pid: children.get(pid, ()))
    order = [root]
    seen = {root}
    i = 0
    while i < len(order):
        for kid in kids_of(order[i]):
            if kid not in seen:
                seen.add(kid)
                order.append(kid)
        i += 1
    return order

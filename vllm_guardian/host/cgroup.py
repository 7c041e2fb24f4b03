"""Pure parsers for the cgroup a process lives in: which pod, which container, which systemd unit.

Reads nothing itself: callers hand it the text of ``/proc/<pid>/cgroup`` (``ProcFS.cgroup``),
of ``systemctl show`` or of a ``cgroup.procs`` file. The shapes it understands:

- cgroup v2, one line ``0::/path``; cgroup v1, one line per hierarchy ``N:controllers:/path``
  (the ``name=systemd`` or ``memory`` hierarchy names the unit and the pod as well as any);
- the kubelet's ``cgroupfs`` driver: ``/kubepods/burstable/pod<uid>/<container id>``;
- its ``systemd`` driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid, '_' for '-'>.slice/<runtime>-<container id>.scope`` with runtime
  ``cri-containerd``, ``crio`` or ``docker``;
- a container ID in the Kubernetes API: ``containerd://<id>``, ``cri-o://<id>``, ``docker://<id>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(r"(?:^|[/-])pod(" + _UID + r")(?:\.slice)?(?:/|$)")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIME_ID = re.compile(r"^[a-z0-9.-]+://([0-9a-f]{64})$")


@dataclass(frozen=True)
class CgroupPlace:
    """Where one process lives: its cgroup paths (v2 first), and the pod/container they name."""

    paths: tuple[str, ...]
    pod_uid: str | None = None
    container_id: str | None = None

    def within(self, cgroup: str) -> bool:
        """Is the process in ``cgroup`` or below it (any hierarchy)?"""
        root = cgroup.rstrip("/") or "/"
        return any(p == root or p.startswith(root.rstrip("/") + "/") for p in self.paths)


def parse_proc_cgroup(text: str) -> CgroupPlace:
    """``/proc/<pid>/cgroup`` → the paths (v2 ``0::`` line first, then v1 ``name=systemd``, then the
    rest) and the pod UID (dashes) and container ID found in them."""
    v2: list[str] = []
    systemd: list[str] = []
    other: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2.append(path)
        elif controllers == "name=systemd":
            systemd.append(path)
        else:
            other.append(path)
    paths = tuple(dict.fromkeys(v2 + systemd + other))
    pod = container = None
    for path in paths:
        m = _POD.search(path)
        if m and pod is None:
            pod = m.group(1).replace("_", "-")
        last = path.rstrip("/").rsplit("/", 1)[-1]
        c = _CONTAINER.match(last)
        if c and container is None:
            container = c.group(1)
    return CgroupPlace(paths, pod, container)


def container_id_of(runtime_id: str) -> str | None:
    """``containerd://<64 hex>`` (a pod status' ``containerID``) → the bare ID; None otherwise."""
    m = _RUNTIME_ID.match(runtime_id or "")
    return m.group(1) if m else None


@dataclass(frozen=True)
class UnitCgroup:
    control_group: str | None  # "/system.slice/vllm.service"; None when the unit is not running
    main_pid: int | None  # None for 0 (no main process)


def parse_systemctl_show(text: str) -> UnitCgroup:
    """``systemctl show -p ControlGroup -p MainPID <unit>`` output → its cgroup and main pid."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    cg = values.get("ControlGroup") or None
    try:
        pid = int(values.get("MainPID", "0"))
    except ValueError:
        pid = 0
    return UnitCgroup(cg, pid if pid > 0 else None)


def parse_cgroup_procs(text: str) -> list[int]:
    """A ``cgroup.procs`` file: one pid a line."""
    return [int(line) for line in text.split() if line.isdigit()]

"""``match.kubernetes`` and ``match.systemd_unit``: which processes of this node a target names.

Reads:
- Kubernetes: the pods of one namespace on this node (``list_node_pods``: field selector
  ``spec.nodeName=$NODE_NAME``, optionally ``metadata.name`` and a label selector), at most once
  per ``pods_ttl`` seconds per query; each candidate process's ``/proc/<pid>/cgroup`` (cached
  per process identity: a process does not change pods);
- systemd: ``systemctl show -p ControlGroup -p MainPID -- <unit>`` (through the command-runner
  seam), then the unit cgroup's ``cgroup.procs`` files under ``/sys/fs/cgroup`` (v2, or the v1
  ``systemd`` hierarchy), falling back to ``/proc/<pid>/cgroup`` when those cannot be read.

Decides: the processes that may be the target's API server (those that look like one first,
``pause`` never), and for a pod without a configured ``api_url`` the URL to reach it: the pod
IP and the container's port named ``http`` (else its first port). A pod the guardian cannot
pick unambiguously (several match) is reported, never guessed.
"""

from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vllm_guardian.discovery.argv import is_api_server
from vllm_guardian.errors import AccessDenied, BackendUnavailable, ProbeFailed, TargetGone
from vllm_guardian.host.cgroup import (
    CgroupPlace,
    container_id_of,
    parse_cgroup_procs,
    parse_proc_cgroup,
    parse_systemctl_show,
)

SYSTEMCTL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PlatformMatch:
    pids: frozenset[int]  # candidates for the API server (the caller takes the top-most)
    host: str | None = None  # where to reach it (a pod's IP); None: from its --host
    port: int | None = None  # its container port; None: from its --port
    why: str = ""  # set when nothing matched
    pod: tuple[str, str] | None = None  # (namespace, name) of the pod it runs in, when matched by one


def _miss(why: str) -> PlatformMatch:
    return PlatformMatch(frozenset(), why=why)


def _container_port(container: Mapping[str, Any]) -> int | None:
    """The container's port named ``http``, else its first; only a port number is taken."""
    ports = [
        p
        for p in container.get("ports") or []
        if isinstance(p, dict) and isinstance(p.get("containerPort"), int) and 0 < p["containerPort"] < 65536
    ]
    for p in ports:
        if p.get("name") == "http":
            return int(p["containerPort"])
    return int(ports[0]["containerPort"]) if ports else None


def _pod_ip(status: Mapping[str, Any]) -> str | None:
    """The pod's IP when the API says one; only an IP address literal is taken (never a name that
    would send the canary, and the server's API key with it, wherever the answer points)."""
    value = status.get("podIP")
    try:
        return str(ipaddress.ip_address(value)) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


class PlatformMatcher:
    """Kept by the daemon between discovery passes (it caches pod lists and process cgroups)."""

    def __init__(
        self,
        procfs: Any,
        *,
        kube: Any = None,
        runner: Any = None,
        sys_cgroup: str = "/sys/fs/cgroup",
        pods_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        read_text: Callable[[str], str] = _read_text,
        walk: Callable[[str], Any] = os.walk,
        is_api_server: Callable[[tuple[str, ...]], bool] | None = None,
    ) -> None:
        self.procfs = procfs
        self.kube = kube
        self.runner = runner
        self.sys_cgroup = sys_cgroup.rstrip("/")
        self.pods_ttl = pods_ttl
        self.clock = clock
        self.read_text = read_text
        self.walk = walk
        self._is_api_server = is_api_server
        self._places: dict[Any, CgroupPlace] = {}
        self._pods: dict[tuple, tuple[float, list[dict]]] = {}

    # ------------------------------------------------------------ shared
    def place(self, pid: int, key: Any) -> CgroupPlace | None:
        cached = self._places.get(key)
        if cached is None:
            try:
                cached = parse_proc_cgroup(self.procfs.cgroup(pid))
            except (TargetGone, AccessDenied, ProbeFailed):
                return None
            self._places[key] = cached
        return cached

    def forget_except(self, keys: set) -> None:
        """Drop cached cgroups of processes that are gone (called once per pass)."""
        # a copy first: an abandoned discovery pass's thread may still be adding to it
        self._places = {k: v for k, v in list(self._places.items()) if k in keys}

    def _prefer_servers(self, pids: set[int], procs: Mapping[int, Any]) -> frozenset[int]:
        pids = {p for p in pids if p in procs and os.path.basename((procs[p].cmdline or ("",))[0]) != "pause"}
        if self._is_api_server is not None:
            servers = {p for p in pids if self._is_api_server(procs[p].cmdline)}
            if servers:
                return frozenset(servers)
        return frozenset(pids)

    def match(self, tc: Any, procs: Mapping[int, Any]) -> PlatformMatch:
        """``procs``: pid -> an object with ``key`` (ProcKey) and ``cmdline``: this pass's processes."""
        if len(self._places) > len(procs):  # processes gone since: their cgroups are not kept
            self.forget_except({p.key for p in procs.values()})
        m = tc.match
        if m.kubernetes is not None:
            return self.match_kubernetes(m.kubernetes, procs)
        if m.systemd_unit is not None:
            return self.match_systemd(m.systemd_unit, procs)
        return _miss("no platform matcher configured")

    # ------------------------------------------------------------ kubernetes
    def _list_pods(self, namespace: str, pod: str | None, selector: str | None) -> list[dict]:
        from vllm_guardian.host.kube import list_node_pods

        query = (namespace, pod, selector)
        now = self.clock()
        cached = self._pods.get(query)
        if cached is not None and now - cached[0] < self.pods_ttl:
            return cached[1]
        items = list_node_pods(self.kube, namespace, pod, selector)
        self._pods[query] = (now, items)
        return items

    def match_kubernetes(self, km: Any, procs: Mapping[int, Any]) -> PlatformMatch:
        if km.namespace is None:  # by pod UID alone: the cgroups say it all, no API needed
            uid = km.pod_uid.lower()
            pids = {
                pid
                for pid, p in procs.items()
                if (place := self.place(pid, p.key)) is not None and place.pod_uid == uid
            }
            if not pids:
                return _miss(f"no process of this node is in pod {uid}")
            return PlatformMatch(self._prefer_servers(pids, procs))
        if self.kube is None:
            return _miss(
                "match.kubernetes needs the Kubernetes API: not running in a pod with a "
                "service account (KUBERNETES_SERVICE_HOST and the token)"
            )
        try:
            items = self._list_pods(km.namespace, km.pod, km.selector)
        except ProbeFailed as e:
            return _miss(str(e))
        wanted = "pod " + (km.pod or "") if km.pod else f"pods with labels {km.selector!r}" if km.selector else "pods"
        pods = [
            i
            for i in items
            if (i.get("status") or {}).get("phase") == "Running"
            and (km.pod_uid is None or (i.get("metadata") or {}).get("uid") == km.pod_uid)
        ]
        if not pods:
            return _miss(f"no running {wanted} in namespace {km.namespace} on this node")
        if len(pods) > 1:
            names = ", ".join(sorted((p.get("metadata") or {}).get("name", "?") for p in pods))
            return _miss(
                f"{len(pods)} running {wanted} in namespace {km.namespace} on this node ({names}): "
                "name one with match.kubernetes.pod, or narrow the selector"
            )
        try:
            return self._match_pod(km, pods[0], procs)
        except (TypeError, ValueError, AttributeError) as e:  # an answer that is not what Kubernetes sends
            return _miss(f"the API server's pod in namespace {km.namespace} is not a Pod object ({type(e).__name__})")

    def _match_pod(self, km: Any, pod: dict, procs: Mapping[int, Any]) -> PlatformMatch:
        md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid = str(md.get("uid", "")).lower()
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        container = None
        if km.container is not None:
            container = next((c for c in containers if c.get("name") == km.container), None)
            if container is None:
                return _miss(f"pod {km.namespace}/{md.get('name')} has no container {km.container!r}")
        elif len(containers) == 1:
            container = containers[0]
        cid = None
        if container is not None:
            st = next(
                (
                    s
                    for s in status.get("containerStatuses") or []
                    if isinstance(s, dict) and s.get("name") == container.get("name")
                ),
                {},
            )
            cid = container_id_of(str(st.get("containerID") or ""))
            if cid is None:
                return _miss(
                    f"container {container.get('name')} of pod {km.namespace}/{md.get('name')} "
                    "is not running (no containerID)"
                )
        pids = set()
        for pid, p in procs.items():
            place = self.place(pid, p.key)
            if place is None:
                continue
            if (place.container_id == cid) if cid else (place.pod_uid == uid):
                pids.add(pid)
        if not pids:
            what = f"container {container.get('name')}" if container is not None else "pod"
            return _miss(
                f"no process of this node is in the {what} of {km.namespace}/{md.get('name')} "
                f"(uid {uid}): is the guardian running with hostPID?"
            )
        port = _container_port(container) if container is not None else None
        named = (str(km.namespace), str(md.get("name") or ""))
        return PlatformMatch(self._prefer_servers(pids, procs), _pod_ip(status), port, pod=named)

    # ------------------------------------------------------------ systemd
    def _unit_procs(self, cgroup: str) -> set[int] | None:
        for base in (self.sys_cgroup, self.sys_cgroup + "/systemd"):  # v2 unified, else v1 systemd
            top = base + cgroup
            found: set[int] = set()
            ok = False
            try:
                for dirpath, _dirs, files in self.walk(top):
                    if "cgroup.procs" in files:
                        found.update(parse_cgroup_procs(self.read_text(os.path.join(dirpath, "cgroup.procs"))))
                        ok = True
            except OSError:
                continue
            if ok:
                return found
        return None

    def match_systemd(self, unit: str, procs: Mapping[int, Any]) -> PlatformMatch:
        if self.runner is None:
            return _miss("match.systemd_unit needs systemctl (no command runner)")
        argv = ("systemctl", "show", "-p", "ControlGroup", "-p", "MainPID", "--", unit)
        try:
            res = self.runner.run(argv, SYSTEMCTL_TIMEOUT_S)
        except BackendUnavailable as e:
            return _miss(f"match.systemd_unit: systemctl is not available here ({e})")
        if not res.ok:
            return _miss(f"systemctl show {unit}: {res.error_text or 'failed'}")
        uc = parse_systemctl_show(res.text)
        if uc.control_group is None:
            return _miss(f"unit {unit} is not running (no ControlGroup)")
        pids = self._unit_procs(uc.control_group)
        if pids is None:  # no cgroupfs to read here: each process's own cgroup says it
            pids = {
                pid
                for pid, p in procs.items()
                if (place := self.place(pid, p.key)) is not None and place.within(uc.control_group)
            }
        pids &= set(procs)
        if uc.main_pid is not None and uc.main_pid in procs:
            pids.add(uc.main_pid)
        if not pids:
            return _miss(f"unit {unit} ({uc.control_group}) has no process")
        return PlatformMatch(self._prefer_servers(pids, procs))


def platform_for(cfg: Any, procfs: Any, kube: Any, runner: Any) -> PlatformMatcher | None:
    """The matcher for a config with ``match.kubernetes`` / ``match.systemd_unit`` targets; None without."""
    if not any(t.match.kubernetes is not None or t.match.systemd_unit is not None for t in cfg.targets):
        return None
    return PlatformMatcher(procfs, kube=kube, runner=runner, is_api_server=is_api_server)

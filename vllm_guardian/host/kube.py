"""The Kubernetes API, in-cluster, for ``restart.mode: kubernetes``: find a process's pod, delete it.

Reads ``/proc/<pid>/cgroup`` (through ProcFS) for the pod UID — when the
remediation begins, with the process's start time checked before and after
the read, so a reused pid can never name another pod — lists the pods of this
node (field selector ``spec.nodeName=$NODE_NAME``) in the target's namespace
(per-namespace RBAC allows nothing wider) to map the UID to namespace/name, and
deletes the pod with a grace period and a UID precondition so its controller
recreates it. The service account token is read again for every call
(projected tokens rotate); the CA comes from the standard in-cluster path; the
API base URL and the opener are seams so tests can point at a local fake API server.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote

from vllm_guardian.errors import BackendUnavailable, ProbeFailed

if TYPE_CHECKING:
    from vllm_guardian.model import ProcKey
    from vllm_guardian.host.procfs import ProcFS

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# cgroup v1: .../kubepods/burstable/pod<uid>/<container>; v2 (systemd driver):
# .../kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in a ``/proc/<pid>/cgroup`` text, normalised to dashes; None outside a pod."""
    m = _POD_UID.search(text)
    return m.group(1).replace("_", "-") if m else None


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


def pod_uid_of(procfs: ProcFS, key: ProcKey, alive: Callable[[ProcKey], bool]) -> str | None:
    """The pod UID of the process ``key`` (pid + start time), or None outside a pod. The
    identity is checked before and after the cgroup read: if the pid was reused meanwhile,
    ``ProbeFailed`` says so instead of naming the new process's pod."""
    if not alive(key):
        raise ProbeFailed(f"pid {key.pid} is no longer the snapshotted process; no pod is looked up")
    text = procfs.read_text(f"{key.pid}/cgroup")
    if not alive(key):
        raise ProbeFailed(f"pid {key.pid} changed while its cgroup was read; no pod is looked up")
    return pod_uid_from_cgroup(text)


class KubeClient:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        ca_file: str | None,
        node_name: str | None,
        timeout: float = 10.0,
        opener: Callable[..., Any] | None = None,
        token_file: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.token_file = token_file
        self.node_name = node_name
        self.timeout = timeout
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._open = opener or (lambda req, timeout: urllib.request.urlopen(req, timeout=timeout, context=ctx))

    @classmethod
    def in_cluster(cls, env: Mapping[str, str], timeout: float = 10.0) -> KubeClient:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SA_DIR / "token").exists():
            raise BackendUnavailable(
                "not running in a Kubernetes pod (no KUBERNETES_SERVICE_HOST or "
                "service-account token): restart.mode kubernetes cannot act"
            )
        return cls(
            f"https://{host}:{port}",
            None,
            str(SA_DIR / "ca.crt"),
            env.get("NODE_NAME"),
            timeout,
            token_file=str(SA_DIR / "token"),
        )

    def _bearer(self) -> str | None:
        if self.token_file is None:
            return self.token
        try:
            with open(self.token_file, encoding="utf-8") as f:
                return f.read(64 * 1024).strip() or None
        except OSError as e:
            raise ProbeFailed(f"kubernetes service-account token {self.token_file}: {e.strerror or e}") from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        token = self._bearer()
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with self._open(req, self.timeout) as resp:
                reply = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise ProbeFailed(f"kubernetes API {method} {path}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ProbeFailed(f"kubernetes API {method} {path}: {e}") from None
        if not isinstance(reply, dict):
            raise ProbeFailed(f"kubernetes API {method} {path}: expected a JSON object, got {type(reply).__name__}")
        return reply

    def find_pod(self, uid: str, namespace: str | None = None) -> PodRef:
        """The pod with this UID on this node: listed in ``namespace`` when given (what a
        per-namespace RoleBinding allows), else cluster-wide (needs a ClusterRoleBinding)."""
        selector = f"?fieldSelector={quote('spec.nodeName=' + self.node_name)}" if self.node_name else ""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods" if namespace else "/api/v1/pods"
        items = self._call("GET", f"{path}{selector}").get("items", [])
        for item in items:
            md = item.get("metadata", {}) if isinstance(item, dict) else {}
            if md.get("uid") != uid:
                continue
            node = (item.get("spec") or {}).get("nodeName")
            if self.node_name and node and node != self.node_name:
                raise ProbeFailed(
                    f"pod {md.get('name')} with uid {uid} runs on node {node}, not on {self.node_name}; not touching it"
                )
            return PodRef(md["namespace"], md["name"], uid)
        where = f"namespace {namespace}" if namespace else "the cluster"
        raise ProbeFailed(f"no pod with uid {uid} on node {self.node_name or '?'} in {where}")

    def delete_pod(self, pod: PodRef, grace_seconds: int) -> None:
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": int(grace_seconds),
            "preconditions": {"uid": pod.uid},
        }  # never delete a recreated pod of the same name
        self._call("DELETE", f"/api/v1/namespaces/{quote(pod.namespace)}/pods/{quote(pod.name)}", body)

    def read_log(
        self,
        namespace: str,
        pod: str | None,
        container: str | None = None,
        *,
        previous: bool = True,
        limit_bytes: int = 256 * 1024,
        pod_uid: str | None = None,
    ) -> str:
        """A pod's container log as text (``previous``: the container that ran before the current one),
        at most ``limit_bytes``. The pod is found by uid when no name is given."""
        if not pod:
            if not pod_uid:
                raise ProbeFailed("kubernetes log: neither a pod name nor a pod uid")
            ref = self.find_pod(pod_uid)
            namespace, pod = ref.namespace, ref.name
        query = {"previous": "true" if previous else "false", "limitBytes": str(int(limit_bytes))}
        if container:
            query["container"] = container
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log?" + "&".join(
            f"{k}={quote(v)}" for k, v in query.items()
        )
        req = urllib.request.Request(self.base_url + path, method="GET")
        req.add_header("Accept", "text/plain")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with self._open(req, self.timeout) as resp:
                return str(resp.read(limit_bytes + 1).decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            raise ProbeFailed(f"kubernetes API GET {path}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ProbeFailed(f"kubernetes API GET {path}: {e}") from None


# ---------------------------------------------------------------- match.kubernetes (additive)
def node_pods_path(namespace: str, node_name: str, pod: str | None = None, label_selector: str | None = None) -> str:
    """The list call ``match.kubernetes`` makes: one namespace, this node only (field selector
    ``spec.nodeName``), optionally one pod by name and/or a label selector. Pure: also what the
    RBAC cross-check reads."""
    fields = f"spec.nodeName={node_name}" + (f",metadata.name={pod}" if pod else "")
    query = f"fieldSelector={quote(fields, safe='')}"
    if label_selector:
        query += f"&labelSelector={quote(label_selector, safe='')}"
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods?{query}"


def list_node_pods(
    client: KubeClient, namespace: str, pod: str | None = None, label_selector: str | None = None
) -> list[dict[str, Any]]:
    """The pods of ``namespace`` scheduled on this node (``client.node_name``), as API objects.
    ``ProbeFailed`` when the node name is unknown: listing a namespace cluster-wide is never done."""
    if not client.node_name:
        raise ProbeFailed(
            "NODE_NAME is not set (the DaemonSet passes spec.nodeName through the "
            "downward API): cannot tell which pods run on this node"
        )
    items = client._call("GET", node_pods_path(namespace, client.node_name, pod, label_selector)).get("items")
    return [i for i in items or [] if isinstance(i, dict)]

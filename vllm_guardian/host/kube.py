"""The Kubernetes API: find a process's pod, and tell the API server about it — its readiness
gate condition, Events, an eviction (or a delete, when configured) — and read its logs; on the
Node, its condition and (opt-in) the guardian's own ``NoSchedule`` taint.

Reads ``/proc/<pid>/cgroup`` (through ProcFS) for the pod UID — when the remediation begins,
with the process's start time checked before and after the read, so a reused pid can never name
another pod — and lists the pods of this node (field selector ``spec.nodeName=$NODE_NAME``) in
the target's namespace (per-namespace RBAC allows nothing wider) to map the UID to
namespace/name. Lists are read in pages (``limit`` + ``continue``) and capped (``max_items``);
every response is capped in bytes. Removing a pod: the Eviction API (policy/v1), which a
PodDisruptionBudget may refuse (HTTP 429, ``EvictionBlocked``; the caller retries within its
drain timeout), or a delete, both with a UID precondition so a pod recreated under the same name
is never touched.

Authentication is taken again on every call, log reads included: the bearer token is re-read
from its file (projected service-account tokens rotate), a client certificate is reloaded when
its file changes (the kubelet's rotate). Where the API server is and how to authenticate:
``vllm_guardian.host.kubeconfig`` (in-cluster, or a kubeconfig for a guardian run by systemd).
The opener is a seam so tests can point at a local fake API server.

A token is never formatted into a message: one read from its file is stripped and refused when
it still holds a control character (naming the file); a request that cannot be sent (http.client
refuses a header value with a ``ValueError`` that quotes it) is reported by its type only. A
token is sent only over https (plain http only to a loopback test server the config opts in to:
``kubeconfig.transport_problem``, checked when the client is built). What the API server answers
is hostile until bounded: each call has one deadline for its whole answer and follows no
redirect (``kube_http``), answers are capped in bytes, lists in items and pages, a list item that
is not an API object fails the list, a Status message is cut to 500 characters with its control
characters escaped, an answer that is not HTTP or not JSON is a ``ProbeFailed`` by type.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.api_keys import clean_key
from vllm_guardian.host.kube_http import ApiError, EvictionBlocked, EvictionUnsupported, api_error, open_with_deadline
from vllm_guardian.host.kubeconfig import SA_DIR, ApiAccess, discover, transport_problem
from vllm_guardian.host.kubeconfig import in_cluster as _in_cluster

if TYPE_CHECKING:
    from vllm_guardian.model import ProcKey
    from vllm_guardian.host.procfs import ProcFS

__all__ = ["SA_DIR", "ApiError", "EvictionBlocked", "KubeClient", "PodRef", "list_node_pods", "pod_uid_from_cgroup"]
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


CONDITION_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


# newest first: the Eviction body is the same in both, only its apiVersion differs
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")


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
        *,
        client_cert: str | None = None,
        client_key: str | None = None,
        insecure: bool = False,
        page_size: int = 500,
        max_items: int = 5000,
        max_bytes: int = 32 * 1024 * 1024,
        plain_http_loopback: bool = False,
    ) -> None:
        """``BackendUnavailable`` when a credential would be sent in the clear, or the inline
        ``token`` holds a control character (``kubeconfig.transport_problem``, ``clean_key``)."""
        if problem := transport_problem(base_url, bool(token or token_file), plain_http_loopback):
            raise BackendUnavailable(problem)
        if token is not None:
            src = clean_key(token, "the kubernetes client's inline token", "token")
            if src.problem:
                raise BackendUnavailable(src.problem)
            token = src.key
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.token_file = token_file
        self._read_tokens: tuple[str, ...] = ()  # the last tokens read from token_file (for secrets())
        self.node_name = node_name
        self.timeout = timeout
        self.ca_file, self.client_cert, self.client_key, self.insecure = ca_file, client_cert, client_key, insecure
        self.page_size, self.max_items, self.max_bytes = page_size, max_items, max_bytes
        self._ctx: tuple[tuple[tuple[str, int], ...], ssl.SSLContext | None] | None = None
        self._eviction_version: str | None = None  # asked of the server once (eviction_version)
        self._open = opener or (lambda req, timeout: open_with_deadline(req, timeout, self._ssl_context()))

    @classmethod
    def from_access(
        cls, access: ApiAccess, node_name: str | None, timeout: float = 10.0, plain_http_loopback: bool = False
    ) -> KubeClient:
        try:
            return cls(
                access.server,
                access.token,
                access.ca_file,
                node_name,
                timeout,
                token_file=access.token_file,
                client_cert=access.client_cert,
                client_key=access.client_key,
                insecure=access.insecure,
                plain_http_loopback=plain_http_loopback,
            )
        except BackendUnavailable as e:
            raise BackendUnavailable(f"{access.source}: {e}") from None

    @classmethod
    def in_cluster(cls, env: Mapping[str, str], timeout: float = 10.0) -> KubeClient:
        return cls.from_access(_in_cluster(env), env.get("NODE_NAME"), timeout)

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str],
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout: float = 10.0,
        plain_http_loopback: bool = False,
    ) -> KubeClient:
        """In-cluster in a pod; else the kubeconfig given (or ``$KUBECONFIG``). The node is
        ``$NODE_NAME``, else this host's name (a guardian on the node, run by systemd).
        ``plain_http_loopback``: a token may go to a loopback ``http://`` server (a test server)."""
        access = discover(env, kubeconfig, context)
        node = env.get("NODE_NAME") or (None if access.source == "in-cluster" else os.uname().nodename)
        return cls.from_access(access, node, timeout, plain_http_loopback)

    # ---------------------------------------------------------------- transport
    def _ssl_context(self) -> ssl.SSLContext | None:
        """Built again when a certificate file changed on disk (rotation); None for plain http."""
        if not self.base_url.startswith("https:"):
            return None
        files = [f for f in (self.ca_file, self.client_cert, self.client_key) if f]
        try:
            stamp = tuple((f, os.stat(f).st_mtime_ns) for f in files)
        except OSError as e:
            raise ProbeFailed(f"kubernetes credentials: {e.filename}: {e.strerror}") from None
        if self._ctx is None or self._ctx[0] != stamp:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            if self.client_cert:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            self._ctx = (stamp, ctx)
        return self._ctx[1]

    def _bearer(self) -> str | None:
        if self.token_file is None:
            return self.token
        try:
            with open(self.token_file, encoding="utf-8") as f:
                raw = f.read(64 * 1024)
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or type(e).__name__
            raise ProbeFailed(f"kubernetes service-account token {self.token_file}: {why}") from None
        src = clean_key(raw, f"token file {self.token_file}", "token")
        if src.problem:
            raise ProbeFailed(f"kubernetes: {src.problem}")
        if src.key and src.key not in self._read_tokens:
            self._read_tokens = (*self._read_tokens[-1:], src.key)  # the current and the one before
        return src.key

    def secrets(self) -> tuple[str, ...]:
        """The tokens this client holds or last sent (for the scrubber of written text; never for
        printing): the inline token, the current and previous token of its file."""
        return tuple(t for t in (self.token, *self._read_tokens) if t)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        limit: int | None = None,
    ) -> bytes:
        """One call, authenticated afresh; at most ``limit`` (default ``max_bytes``) bytes of answer."""
        cap = self.max_bytes if limit is None else limit
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", content_type)
        token = self._bearer()
        if token:  # never carried along a redirect (none is followed either: kube_http)
            req.add_unredirected_header("Authorization", f"Bearer {token}")
        try:
            with self._open(req, self.timeout) as resp:
                raw = resp.read(cap + 1)
        except urllib.error.HTTPError as e:
            raise api_error(method, path, e) from None
        except ValueError as e:  # http.client's message quotes the header value it refused: the token
            raise ProbeFailed(
                f"kubernetes API {method} {path}: {type(e).__name__}: the request could not be sent "
                "(a header or the URL is invalid; values not shown)"
            ) from None
        except http.client.HTTPException as e:  # a status line or headers that are not HTTP
            raise ProbeFailed(f"kubernetes API {method} {path}: {type(e).__name__}: the answer is not HTTP") from None
        except (urllib.error.URLError, OSError, ssl.SSLError) as e:
            raise ProbeFailed(f"kubernetes API {method} {path}: {e}") from None
        if limit is None and len(raw) > cap:
            raise ProbeFailed(f"kubernetes API {method} {path}: answer larger than {cap} bytes; not read")
        return bytes(raw[:cap])

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> dict[str, Any]:
        raw = self._request(method, path, body, content_type=content_type)
        try:
            reply = json.loads(raw or b"{}")
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep to decode
            raise ProbeFailed(f"kubernetes API {method} {path}: not JSON ({type(e).__name__})") from None
        if not isinstance(reply, dict):
            raise ProbeFailed(f"kubernetes API {method} {path}: expected a JSON object, got {type(reply).__name__}")
        return reply

    def _list(self, path: str) -> list[dict[str, Any]]:
        """Every item of a list call, page by page (``limit``/``continue``), at most ``max_items``."""
        items: list[dict[str, Any]] = []
        token = ""
        sep = "&" if "?" in path else "?"
        for _ in range(self.max_items // max(1, self.page_size) + 2):  # a server that never stops paging
            page = f"{path}{sep}limit={self.page_size}" + (f"&continue={quote(token[:4096], safe='')}" if token else "")
            reply = self._call("GET", page)
            items += _objects(reply.get("items"), f"kubernetes API GET {path}")
            if len(items) > self.max_items:
                raise ProbeFailed(f"kubernetes API GET {path}: more than {self.max_items} items; narrow the query")
            more = reply.get("metadata")
            token = str(more.get("continue") or "") if isinstance(more, dict) else ""
            if not token:
                return items
        raise ProbeFailed(f"kubernetes API GET {path}: the pages do not end; not read further")

    # ---------------------------------------------------------------- pods
    def find_pod(self, uid: str, namespace: str | None = None) -> PodRef:
        """The pod with this UID on this node: listed in ``namespace`` when given (what a
        per-namespace RoleBinding allows), else cluster-wide (needs a ClusterRoleBinding)."""
        selector = f"?fieldSelector={quote('spec.nodeName=' + self.node_name)}" if self.node_name else ""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods" if namespace else "/api/v1/pods"
        for item in self._list(f"{path}{selector}"):
            md = item.get("metadata", {})
            if md.get("uid") != uid:
                continue
            node = (item.get("spec") or {}).get("nodeName")
            if self.node_name and node and node != self.node_name:
                raise ProbeFailed(
                    f"pod {md.get('name')} with uid {uid} runs on node {node}, not on {self.node_name}; not touching it"
                )
            namespace_, name = md.get("namespace"), md.get("name")
            if not isinstance(namespace_, str) or not isinstance(name, str):
                raise ProbeFailed(f"the pod with uid {uid} has no namespace or name in the API's answer")
            return PodRef(namespace_, name, uid)
        where = f"namespace {namespace}" if namespace else "the cluster"
        raise ProbeFailed(f"no pod with uid {uid} on node {self.node_name or '?'} in {where}")

    def _pod_path(self, pod: PodRef) -> str:
        return f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/{quote(pod.name, safe='')}"

    def delete_pod(self, pod: PodRef, grace_seconds: int) -> None:
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": int(grace_seconds),
            "preconditions": {"uid": pod.uid},
        }  # never delete a recreated pod of the same name
        self._call("DELETE", self._pod_path(pod), body)

    def eviction_version(self) -> str:
        """The Eviction API version this server serves, asked once of its discovery document
        (``/apis/policy``, readable by every authenticated user): ``policy/v1`` where served (1.22+),
        else ``policy/v1beta1`` (1.20 and 1.21 serve only that). A server serving neither raises
        ``EvictionUnsupported``, one clear refusal, never a guessed body."""
        if self._eviction_version is None:
            group = self._call("GET", "/apis/policy")
            versions = group.get("versions")
            served = (
                {str(v.get("groupVersion")) for v in versions if isinstance(v, dict)}
                if isinstance(versions, list)
                else set()
            )
            for candidate in EVICTION_VERSIONS:
                if candidate in served:
                    self._eviction_version = candidate
                    break
            else:
                raise EvictionUnsupported(
                    f"kubernetes API: the server serves no Eviction API (policy group versions: "
                    f"{', '.join(sorted(served)) or 'none'}; the guardian speaks {', '.join(EVICTION_VERSIONS)})",
                    404,
                )
        return self._eviction_version

    def evict_pod(self, pod: PodRef, grace_seconds: int) -> None:
        """An Eviction in the version the server serves (PodDisruptionBudgets hold):
        ``EvictionBlocked`` on 429, ``EvictionUnsupported`` when it serves none."""
        body = {
            "apiVersion": self.eviction_version(),
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"gracePeriodSeconds": int(grace_seconds), "preconditions": {"uid": pod.uid}},
        }
        try:
            self._call("POST", self._pod_path(pod) + "/eviction", body)
        except ApiError as e:
            if e.code == 429:
                raise EvictionBlocked(
                    f"eviction of pod {pod.namespace}/{pod.name} refused (429): "
                    f"{e.message or 'a PodDisruptionBudget allows no disruption now'}",
                    429,
                    e.message,
                    e.retry_after,
                ) from None
            raise

    def patch_pod_condition(self, pod: PodRef, condition: Mapping[str, Any]) -> None:
        """Set one condition of the pod's status (strategic merge: conditions merge by ``type``),
        only on the pod with this UID (the patch's precondition)."""
        body = {"metadata": {"uid": pod.uid}, "status": {"conditions": [dict(condition)]}}
        self._call("PATCH", self._pod_path(pod) + "/status", body, content_type=CONDITION_PATCH)

    def patch_node_condition(self, node: str, condition: Mapping[str, Any]) -> None:
        body = {"status": {"conditions": [dict(condition)]}}
        self._call("PATCH", f"/api/v1/nodes/{quote(node, safe='')}/status", body, content_type=CONDITION_PATCH)

    def read_node(self, node: str) -> dict[str, Any]:
        """The Node object (its ``spec.taints`` and ``metadata.resourceVersion``)."""
        return self._call("GET", f"/api/v1/nodes/{quote(node, safe='')}")

    def set_node_taints(self, node: str, resource_version: str, taints: list[dict[str, Any]]) -> None:
        """Replace the Node's ``spec.taints`` with ``taints``, only if the Node is still at
        ``resource_version`` (a JSON patch whose ``test`` fails with HTTP 422 otherwise): a taint
        another writer added meanwhile is never overwritten; read the node again and retry.
        (``spec.taints`` has no merge key, so a strategic merge would replace the list blindly.)"""
        body = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "add", "path": "/spec/taints", "value": taints},
        ]
        self._call("PATCH", f"/api/v1/nodes/{quote(node, safe='')}", body, content_type=JSON_PATCH)

    # ---------------------------------------------------------------- events
    def create_event(self, namespace: str, event: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", dict(event))

    def patch_event(self, namespace: str, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events/{quote(name, safe='')}"
        return self._call("PATCH", path, dict(changes), content_type=MERGE_PATCH)

    # ---------------------------------------------------------------- logs
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
        # what kubectl sends, and the log still comes back as text: a real kube-apiserver answers
        # `Accept: text/plain` alone with 406 (tests/k8s_real shows both)
        raw = self._request("GET", path, accept="application/json, */*", limit=int(limit_bytes))
        return raw.decode("utf-8", errors="replace")


def _objects(items: Any, what: str) -> list[dict[str, Any]]:
    """The items of a list answer, each an object whose metadata, spec and status are objects
    when present; ``ProbeFailed`` otherwise (an answer that is not what Kubernetes sends)."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ProbeFailed(f"{what}: items is not a list; not what Kubernetes sends")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or any(
            not isinstance(item.get(k), dict) for k in ("metadata", "spec", "status") if item.get(k) is not None
        ):
            raise ProbeFailed(f"{what}: item {i} is not an API object; not what Kubernetes sends")
    return items


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
    return client._list(node_pods_path(namespace, client.node_name, pod, label_selector))

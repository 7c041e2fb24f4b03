"""A fake Kubernetes API server for component tests: the few core/v1 and policy/v1 calls the
guardian makes, answered the way the real API server answers them.

- Authentication on every path: ``Authorization: Bearer <token>`` must equal ``token()`` *now*
  (tests rotate it), else 401 with a Status; every request is recorded with its method, path,
  query, body and whether it was authenticated.
- ``GET /api/v1/[namespaces/<ns>/]pods``: field selectors ``spec.nodeName`` and
  ``metadata.name``, label selector ``k=v[,k=v]``; ``limit`` + ``continue`` pagination.
- ``PATCH .../pods/<name>/status`` (strategic merge): conditions merge by ``type``;
  ``metadata.uid`` in the patch is a precondition (422 on mismatch), as the real server does.
- ``POST .../pods/<name>/eviction``: 429 with a PDB Status while ``pdb_blocks`` > 0 (each call
  counts one down), else the pod is removed (201); the UID precondition is checked (409).
- ``GET /apis/policy``: the policy group's discovery document, serving ``policy_versions``
  (``policy/v1`` by default; ``("policy/v1beta1",)`` plays a 1.20 server); an Eviction whose
  ``apiVersion`` is not served is 400, as there.
- ``DELETE .../pods/<name>`` with a UID precondition; ``GET .../pods/<name>/log``, negotiated as
  the real server does it: an ``Accept`` admitting neither ``application/json`` nor ``*/*`` is 406.
- ``POST .../events`` (409 when the name exists) and ``PATCH .../events/<name>`` (merge patch).
- ``PATCH /api/v1/nodes/<name>/status``; ``GET /api/v1/nodes/<name>`` and ``PATCH
  /api/v1/nodes/<name>`` as a JSON patch (``test``, ``add``, ``replace``, ``remove`` on object
  paths): a failed ``test`` is 422 and changes nothing; every write moves ``resourceVersion``.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    authenticated: bool
    content_type: str | None = None
    accept: str | None = None


@dataclass
class ApiState:
    token: Callable[[], str]
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    pdb_blocks: int = 0
    policy_versions: tuple[str, ...] = ("policy/v1",)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_pod(self, namespace: str, name: str, uid: str, node: str, labels: dict[str, str] | None = None) -> None:
        self.pods[(namespace, name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "labels": dict(labels or {})},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": 8000}]}],
            },
            "status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": []},
        }

    def add_node(self, name: str, taints: list[dict[str, Any]] | None = None) -> None:
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"taints": list(taints)} if taints is not None else {},
            "status": {"conditions": []},
        }

    def condition(self, namespace: str, name: str, ctype: str) -> dict[str, Any] | None:
        pod = self.pods.get((namespace, name))
        for c in (pod or {}).get("status", {}).get("conditions", []):
            if c["type"] == ctype:
                return c
        return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def _merge_conditions(current: list[dict], patch: list[dict]) -> list[dict]:
    out = [dict(c) for c in current]
    for c in patch:
        for i, old in enumerate(out):
            if old["type"] == c["type"]:
                out[i] = {**old, **c}
                break
        else:
            out.append(dict(c))
    return out


def _bump(obj: dict[str, Any]) -> None:
    md = obj.setdefault("metadata", {})
    md["resourceVersion"] = str(int(md.get("resourceVersion") or 0) + 1)


class _PatchTestFailed(ValueError):
    pass


def _json_patch(doc: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """RFC 6902 on object members (what the guardian sends); all or nothing."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        where = out
        for p in parents:
            where = where[p]
        if op["op"] == "test":
            if where.get(last) != op["value"]:
                raise _PatchTestFailed(f"testing value {op['path']} failed")
        elif op["op"] == "add":
            where[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if last not in where:
                raise KeyError(last)
            where[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del where[last]
        else:
            raise ValueError(f"op {op['op']!r} not supported by this fake")
    return out


def _matches(pod: dict, node: str | None, name: str | None, labels: dict[str, str]) -> bool:
    md = pod["metadata"]
    return (
        (node is None or pod["spec"]["nodeName"] == node)
        and (name is None or md["name"] == name)
        and all(md["labels"].get(k) == v for k, v in labels.items())
    )


class _Handler(BaseHTTPRequestHandler):
    state: ApiState

    def log_message(self, *a: Any) -> None:
        pass

    def _reply(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        st = self.state
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        ok = self.headers.get("Authorization") == f"Bearer {st.token()}"
        with st.lock:
            st.seen.append(
                Seen(
                    self.command,
                    url.path,
                    query,
                    body,
                    ok,
                    self.headers.get("Content-Type"),
                    self.headers.get("Accept"),
                )
            )
            if not ok:
                return self._reply(401, _status(401, "Unauthorized", "Unauthorized"))
            code, answer, ctype = self._route(url.path.strip("/").split("/"), query, body)
        self._reply(code, answer, ctype)

    do_GET = do_POST = do_PATCH = do_DELETE = _handle

    def _route(self, parts: list[str], query: dict[str, str], body: Any) -> tuple[int, Any, str]:
        st, json_ = self.state, "application/json"
        if parts == ["apis", "policy"] and self.command == "GET":
            versions = [{"groupVersion": v, "version": v.split("/")[1]} for v in st.policy_versions]
            return 200, {"kind": "APIGroup", "name": "policy", "versions": versions}, json_
        if parts[:2] != ["api", "v1"]:
            return 404, _status(404, "NotFound", "no such API"), json_
        rest = parts[2:]
        if rest[:1] == ["nodes"] and len(rest) == 3 and rest[2] == "status" and self.command == "PATCH":
            node = st.nodes.setdefault(rest[1], {"status": {"conditions": []}})
            node["status"]["conditions"] = _merge_conditions(node["status"]["conditions"], body["status"]["conditions"])
            _bump(node)
            return 200, node, json_
        if rest[:1] == ["nodes"] and len(rest) == 2:
            return self._node(rest[1], body)
        namespace = None
        if rest[:1] == ["namespaces"]:
            namespace, rest = rest[1], rest[2:]
        if rest == ["pods"] and self.command == "GET":
            return 200, self._list(namespace, query), json_
        if rest[:1] == ["pods"] and len(rest) >= 2 and namespace:
            return self._pod(namespace, rest[1], rest[2] if len(rest) > 2 else None, query, body)
        if rest[:1] == ["events"] and namespace:
            return self._event(namespace, rest[1] if len(rest) > 1 else None, body)
        return 404, _status(404, "NotFound", "/".join(parts)), json_

    def _list(self, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
        fields = dict(f.split("=", 1) for f in query.get("fieldSelector", "").split(",") if "=" in f)
        labels = dict(f.split("=", 1) for f in query.get("labelSelector", "").split(",") if "=" in f)
        items = [
            copy.deepcopy(p)
            for (ns, _), p in sorted(self.state.pods.items())
            if (namespace is None or ns == namespace)
            and _matches(p, fields.get("spec.nodeName"), fields.get("metadata.name"), labels)
        ]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        more = start + limit < len(items)
        return {"kind": "PodList", "metadata": {"continue": str(start + limit) if more else ""}, "items": page}

    def _pod(self, ns: str, name: str, sub: str | None, query: dict[str, str], body: Any) -> tuple[int, Any, str]:
        st, json_ = self.state, "application/json"
        pod = st.pods.get((ns, name))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found'), json_
        uid = pod["metadata"]["uid"]
        if sub == "log" and self.command == "GET":
            accept = self.headers.get("Accept") or "*/*"
            if not any(a.split(";")[0].strip() in ("application/json", "*/*") for a in accept.split(",")):
                return (
                    406,
                    _status(406, "NotAcceptable", f"only the following media types are accepted: {json_}"),
                    json_,
                )
            return 200, st.logs.get((ns, name), ""), "text/plain"
        if sub == "status" and self.command == "PATCH":
            want = (body.get("metadata") or {}).get("uid")
            if want and want != uid:  # a real server answers 422 here (tests/k8s_real), 409 on an eviction's
                return 422, _status(422, "Invalid", f"Precondition failed: UID in precondition: {want}"), json_
            conds = pod["status"]["conditions"]
            pod["status"]["conditions"] = _merge_conditions(conds, body["status"]["conditions"])
            return 200, copy.deepcopy(pod), json_
        if sub == "eviction" and self.command == "POST":
            if body.get("apiVersion") not in st.policy_versions:
                return (
                    400,
                    _status(400, "BadRequest", f'no kind "Eviction" is registered for {body.get("apiVersion")}'),
                    json_,
                )
            want = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if want and want != uid:
                return 409, _status(409, "Conflict", "Precondition failed: UID"), json_
            if st.pdb_blocks > 0:
                st.pdb_blocks -= 1
                msg = "Cannot evict pod as it would violate the pod's disruption budget."
                return 429, _status(429, "TooManyRequests", msg), json_
            del st.pods[(ns, name)]
            return 201, {"kind": "Status", "status": "Success"}, json_
        if sub is None and self.command == "DELETE":
            want = ((body or {}).get("preconditions") or {}).get("uid")
            if want and want != uid:
                return 409, _status(409, "Conflict", "Precondition failed: UID"), json_
            del st.pods[(ns, name)]
            return 200, pod, json_
        return 405, _status(405, "MethodNotAllowed", f"{self.command} pods/{sub}"), json_

    def _node(self, name: str, body: Any) -> tuple[int, Any, str]:
        st, json_ = self.state, "application/json"
        node = st.nodes.get(name)
        if node is None:
            return 404, _status(404, "NotFound", f'nodes "{name}" not found'), json_
        if self.command == "GET":
            return 200, copy.deepcopy(node), json_
        if self.command != "PATCH":
            return 405, _status(405, "MethodNotAllowed", f"{self.command} nodes"), json_
        if self.headers.get("Content-Type") != "application/json-patch+json" or not isinstance(body, list):
            return 415, _status(415, "UnsupportedMediaType", "this fake takes JSON patches on nodes"), json_
        try:
            patched = _json_patch(node, body)
        except _PatchTestFailed as e:
            message = f"the server rejected our request due to an error in our request: {e}"
            return 422, _status(422, "Invalid", message), json_
        except (KeyError, TypeError, ValueError) as e:
            return 400, _status(400, "BadRequest", f"bad JSON patch: {e}"), json_
        _bump(patched)
        st.nodes[name] = patched
        return 200, copy.deepcopy(patched), json_

    def _event(self, ns: str, name: str | None, body: Any) -> tuple[int, Any, str]:
        st, json_ = self.state, "application/json"
        if self.command == "POST" and name is None:
            key = (ns, body["metadata"]["name"])
            if key in st.events:
                return 409, _status(409, "AlreadyExists", f'events "{key[1]}" already exists'), json_
            st.events[key] = dict(body)
            return 201, body, json_
        if self.command == "PATCH" and name is not None:
            if (ns, name) not in st.events:
                return 404, _status(404, "NotFound", f'events "{name}" not found'), json_
            st.events[(ns, name)].update(body)
            return 200, st.events[(ns, name)], json_
        return 405, _status(405, "MethodNotAllowed", f"{self.command} events"), json_


class FakeKubeApi:
    """``with FakeKubeApi(token=lambda: ...) as api:`` — ``api.url``, ``api.state``."""

    def __init__(self, token: Callable[[], str]) -> None:
        self.state = ApiState(token)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

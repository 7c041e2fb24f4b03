"""Where the Kubernetes API is and how to authenticate to it: in-cluster (the pod's service
account) or a kubeconfig file (a guardian run by systemd on a Kubernetes node).

Reads the kubeconfig (YAML) and the environment; decides the API server URL, the CA, and the
credential: a bearer token (inline or ``tokenFile``, re-read on every call by the client), or a
client certificate and key (files, re-loaded by the client when they change on disk, as the
kubelet's rotate; inline ``-data`` values are written once to a private directory). ``exec`` and
``auth-provider`` credential plugins are refused with a clear error: the guardian runs no
external programs to get a token.

A token is a secret: whitespace around it is dropped (a token pasted from a file ends in a
newline) and one that still holds a control character is refused, as API keys are
(``api_keys.clean_key``); every message names where the token came from, never its value.
Decides too whether a server may be called with credentials at all (``transport_problem``): only
over ``https``; plain ``http`` only to a loopback address and only when the config opts in
(``kubernetes.plain_http_loopback``: a local test API server), since a bearer token sent over
plain http is readable by anyone on the path (docs/operate.md, "Outside a pod").
"""

from __future__ import annotations

import base64
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from vllm_guardian.config.yaml_text import load_yaml
from vllm_guardian.errors import BackendUnavailable, ConfigError
from vllm_guardian.host.api_keys import clean_key

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ApiAccess:
    """Everything ``KubeClient`` needs to reach and authenticate to one API server."""

    server: str
    ca_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False
    source: str = ""  # "in-cluster" or the kubeconfig's path and context, for messages

    def __repr__(self) -> str:  # a dataclass repr would print the token
        token = "<set>" if self.token else None
        return (
            f"ApiAccess(server={self.server!r}, token={token}, token_file={self.token_file!r}, source={self.source!r})"
        )


def server_origin(server: str) -> str:
    """``scheme://host[:port]`` of an API server URL: what messages print (never a user-info part)."""
    parts = urlsplit(server)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ":?"
    host = parts.hostname or "?"
    return f"{parts.scheme}://{'[' + host + ']' if ':' in host else host}{port}"


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def transport_problem(server: str, credentials: bool, plain_http_loopback: bool = False) -> str | None:
    """Why ``server`` must not be called (None: it may). Only ``https`` and ``http``; a token over
    plain ``http`` only to a loopback address, and only with ``plain_http_loopback`` (a local test
    server). Pure; the message names the server's origin, never a credential."""
    parts = urlsplit(server)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return None
    origin = server_origin(server)
    if scheme != "http":
        return f"kubernetes API server {origin}: only https (or http to a loopback test server) is spoken"
    if not credentials:
        return None
    if plain_http_loopback and _loopback(parts.hostname):
        return None
    where = (
        "kubernetes.plain_http_loopback covers loopback addresses only"
        if plain_http_loopback
        else "for a local test server on a loopback address only, set kubernetes.plain_http_loopback: true"
    )
    return (
        f"kubernetes API server {origin} is plain http: the bearer token would be sent unencrypted; "
        f"refused (use https; {where})"
    )


def in_cluster(env: Mapping[str, str], sa_dir: Path = SA_DIR) -> ApiAccess:
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not (sa_dir / "token").exists():
        raise BackendUnavailable(
            "not running in a Kubernetes pod (no KUBERNETES_SERVICE_HOST or service-account token) "
            "and no kubeconfig (kubernetes.kubeconfig or $KUBECONFIG): the Kubernetes API cannot be reached"
        )
    host = f"[{host}]" if ":" in host else host
    return ApiAccess(
        f"https://{host}:{port}",
        ca_file=str(sa_dir / "ca.crt"),
        token_file=str(sa_dir / "token"),
        source="in-cluster",
    )


def _named(items: Any, name: str, what: str, path: str) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(what), dict):
            return dict(item[what])
    raise BackendUnavailable(f"kubeconfig {path}: no {what} named {name!r}")


def _data_file(data: str, suffix: str, private_dir: Path) -> str:
    raw = base64.b64decode(data)
    fd, name = tempfile.mkstemp(suffix=suffix, dir=private_dir)
    with os.fdopen(fd, "wb") as fh:
        fh.write(raw)
    return name


def _inline_token(value: Any, origin: str) -> str | None:
    """An inline ``token`` made usable (``clean_key``); BackendUnavailable naming ``origin`` (never
    the value) when it holds a control character."""
    if value is None or value == "":
        return None
    if isinstance(value, (dict, list)):
        raise BackendUnavailable(f"the token from {origin} is not a string")
    src = clean_key(str(value), origin, "token")
    if src.problem:
        raise BackendUnavailable(src.problem)
    return src.key


def _resolve(base: Path, value: Any) -> str | None:
    if not value:
        return None
    p = Path(str(value))
    return str(p if p.is_absolute() else base / p)


def parse_kubeconfig(text: str, path: str, context: str | None = None, private_dir: Path | None = None) -> ApiAccess:
    """The access a kubeconfig document describes for ``context`` (default: its current-context)."""
    try:  # the config's strict loader: bounded depth and aliases; errors by position, never a line's text
        doc = load_yaml(text, f"kubeconfig {path}")
    except ConfigError as e:
        raise BackendUnavailable("; ".join(e.problems)) from None
    if not isinstance(doc, dict):
        raise BackendUnavailable(f"kubeconfig {path}: expected a mapping")
    name = context or doc.get("current-context")
    if not name:
        raise BackendUnavailable(f"kubeconfig {path}: no current-context and none configured")
    ctx = _named(doc.get("contexts"), str(name), "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user")), "user", path) if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise BackendUnavailable(
            f"kubeconfig {path}: user {ctx.get('user')!r} uses an exec/auth-provider plugin, which the guardian "
            "does not run: give it a kubeconfig with a token, tokenFile or client certificate"
        )
    server = cluster.get("server")
    if not server:
        raise BackendUnavailable(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    base = Path(path).parent
    needs_dir = any(k in cluster or k in user for k in ("certificate-authority-data",)) or any(
        k in user for k in ("client-certificate-data", "client-key-data")
    )
    if needs_dir and private_dir is None:
        private_dir = Path(tempfile.mkdtemp(prefix="guardian-kube-"))  # mode 0700
    ca = _resolve(base, cluster.get("certificate-authority"))
    if cluster.get("certificate-authority-data") and private_dir is not None:
        ca = _data_file(cluster["certificate-authority-data"], ".crt", private_dir)
    cert, key = _resolve(base, user.get("client-certificate")), _resolve(base, user.get("client-key"))
    if user.get("client-certificate-data") and private_dir is not None:
        cert = _data_file(user["client-certificate-data"], ".crt", private_dir)
    if user.get("client-key-data") and private_dir is not None:
        key = _data_file(user["client-key-data"], ".key", private_dir)
    return ApiAccess(
        str(server),
        ca_file=ca,
        token=_inline_token(user.get("token"), f"kubeconfig {path} user {ctx.get('user')!r}"),
        token_file=_resolve(base, user.get("tokenFile")),
        client_cert=cert,
        client_key=key,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        source=f"kubeconfig {path} (context {name})",
    )


def load_kubeconfig(path: str, context: str | None = None) -> ApiAccess:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise BackendUnavailable(f"kubeconfig {path}: {e.strerror or e}") from None
    return parse_kubeconfig(text, path, context)


def discover(env: Mapping[str, str], kubeconfig: str | None = None, context: str | None = None) -> ApiAccess:
    """In-cluster when running in a pod, else the kubeconfig configured or named by ``$KUBECONFIG``."""
    if kubeconfig:
        return load_kubeconfig(kubeconfig, context)
    if env.get("KUBERNETES_SERVICE_HOST") and (SA_DIR / "token").exists():
        return in_cluster(env)
    if env.get("KUBECONFIG"):
        return load_kubeconfig(env["KUBECONFIG"].split(os.pathsep)[0], context)
    return in_cluster(env)  # raises, saying what is missing

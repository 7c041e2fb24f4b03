"""Where the Kubernetes API is and how to authenticate to it: in-cluster (the pod's service
account) or a kubeconfig file (a guardian run by systemd on a Kubernetes node).

Reads the kubeconfig (YAML) and the environment; decides the API server URL, the CA, and the
credential: a bearer token (inline or ``tokenFile``, re-read on every call by the client), or a
client certificate and key (files, re-loaded by the client when they change on disk, as the
kubelet's rotate; inline ``-data`` values are written once to a private directory). ``exec`` and
``auth-provider`` credential plugins are refused with a clear error: the guardian runs no
external programs to get a token.
"""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from vllm_guardian.errors import BackendUnavailable

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


def _resolve(base: Path, value: Any) -> str | None:
    if not value:
        return None
    p = Path(str(value))
    return str(p if p.is_absolute() else base / p)


def parse_kubeconfig(text: str, path: str, context: str | None = None, private_dir: Path | None = None) -> ApiAccess:
    """The access a kubeconfig document describes for ``context`` (default: its current-context)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BackendUnavailable(f"kubeconfig {path}: not YAML: {e}") from None
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
        token=str(user["token"]) if user.get("token") else None,
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

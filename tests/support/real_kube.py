"""A real kube-apiserver (v1.20.2, built from Debian's source by ``tools/kube_apiserver.sh``) and
etcd on free loopback ports, for the real-API-server tier (tests/k8s_real, ``make k8s-real``).

``RealKube.start(dir)`` runs both (about 6 s), with RBAC as the authorizer, an admin token, and
service-account signing keys, so ``token_for`` hands out a real ServiceAccount token through the
TokenRequest API. There is no kubelet and no controller: pods never run, and the test plays the
kubelet (binds the pod to a node, patches its status); a namespace never finishes deleting, so each
test uses its own.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.wait import poll
from tools.k8s_render import CHART, ROOT, helm_template, tool

ADMIN_TOKEN = "admin-token-for-the-test-tier"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build() -> Path:
    """The cached binaries (built on first use: ~15 min of one core on a cold machine)."""
    out = subprocess.run([str(ROOT / "tools" / "kube_apiserver.sh")], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"tools/kube_apiserver.sh failed ({out.returncode}): {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Answer:
    code: int
    body: Any
    content_type: str


@dataclass
class RealKube:
    dir: Path
    url: str
    ca_file: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def start(cls, bins: Path, dir: Path) -> RealKube:
        dir.mkdir(parents=True, exist_ok=True)
        client, peer, secure = free_port(), free_port(), free_port()
        (dir / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,1,system:masters\n")
        subprocess.run(["openssl", "genrsa", "-out", str(dir / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(dir / "sa.key"), "-pubout", "-out", str(dir / "sa.pub")],
            check=True,
            capture_output=True,
        )
        etcd_log = open(dir / "etcd.log", "wb")  # noqa: SIM115 - closed with the process
        etcd = subprocess.Popen(
            [
                str(bins / "etcd"),
                "--name=test",
                f"--data-dir={dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=test=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
            stdout=etcd_log,
            stderr=subprocess.STDOUT,
        )
        api_log = open(dir / "apiserver.log", "wb")  # noqa: SIM115
        apiserver = subprocess.Popen(
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={secure}",
                f"--cert-dir={dir / 'certs'}",
                f"--token-auth-file={dir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={dir / 'sa.pub'}",
                f"--service-account-signing-key-file={dir / 'sa.key'}",
                "--api-audiences=https://kubernetes.default.svc",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
            ],
            stdout=api_log,
            stderr=subprocess.STDOUT,
        )
        kube = cls(dir, f"https://127.0.0.1:{secure}", str(dir / "certs" / "apiserver.crt"), [etcd, apiserver])
        ready = poll(lambda: kube._ready(), timeout=120, every=0.5)
        if not ready:
            kube.stop()
            raise RuntimeError(f"kube-apiserver not ready in 120 s: {(dir / 'apiserver.log').read_text()[-3000:]}")
        kube._write_kubeconfig()
        return kube

    def _ready(self) -> bool:
        if any(p.poll() is not None for p in self.procs):
            raise RuntimeError(f"etcd or kube-apiserver exited: {(self.dir / 'apiserver.log').read_text()[-3000:]}")
        if not Path(self.ca_file).exists():
            return False
        try:
            return self.request("GET", "/readyz").code == 200
        except OSError:
            return False

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "admin",
            "clusters": [{"name": "real", "cluster": {"server": self.url, "certificate-authority": self.ca_file}}],
            "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
            "contexts": [{"name": "admin", "context": {"cluster": "real", "user": "admin"}}],
        }
        (self.dir / "kubeconfig").write_text(yaml.safe_dump(config))

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # ---- calls as admin (or as whoever's token is given)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str = ADMIN_TOKEN,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> Answer:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=20, context=ctx) as resp:
                raw, code, ctype = resp.read(), resp.status, resp.headers.get("Content-Type") or ""
        except urllib.error.HTTPError as e:
            raw, code, ctype = e.read(), e.code, e.headers.get("Content-Type") or ""
        parsed: Any = raw.decode("utf-8", "replace")
        if "json" in ctype:
            parsed = json.loads(raw or b"null")
        return Answer(code, parsed, ctype)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [tool("kubectl"), f"--kubeconfig={self.dir / 'kubeconfig'}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": str(self.dir)},
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def apply(self, objects: list[dict[str, Any]], *, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
        """Server-side apply of ``objects`` as admin (``dry_run``: the server validates, stores nothing)."""
        args = ["apply", "--server-side", "--field-manager=k8s-real-test", "-f", "-"]
        if dry_run:
            args.append("--dry-run=server")
        return self.kubectl(*args, stdin=yaml.safe_dump_all(objects), check=False)

    def namespace(self, name: str) -> None:
        answer = self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        assert answer.code in (201, 409), answer

    def token_for(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A ServiceAccount token from the TokenRequest API (what a projected volume holds)."""
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        assert answer.code == 201, answer
        return str(answer.body["status"]["token"])

    def add_pod(self, namespace: str, name: str, node: str, *, container_id: str | None = None) -> dict[str, Any]:
        """A pod bound to ``node`` (no scheduler: spec.nodeName set at creation), its status patched
        the way a kubelet would (Running, the container id), as admin. Returns the stored pod."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "vllm"}},
            "spec": {
                "nodeName": node,
                "readinessGates": [{"conditionType": "vllm-guardian.io/serving"}],
                "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0"}],
            },
        }
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        assert answer.code == 201, answer
        status = {
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "containerStatuses": [
                    {
                        "name": "vllm",
                        "ready": True,
                        "restartCount": 0,
                        "image": "vllm/vllm-openai:v0.32.0",
                        "imageID": "",
                        "containerID": f"containerd://{container_id or '0' * 64}",
                        "state": {"running": {}},
                    }
                ],
            }
        }
        answer = self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            status,
            content_type="application/strategic-merge-patch+json",
        )
        assert answer.code == 200, answer
        return dict(answer.body)

    def add_node(self, name: str) -> None:
        """A Node object (no kubelet behind it), as admin."""
        answer = self.request("POST", "/api/v1/nodes", {"metadata": {"name": name}})
        assert answer.code in (201, 409), answer

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        answer = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return dict(answer.body) if answer.code == 200 else None

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/api/v1/namespaces/{namespace}/events").body["items"])


def grant(kube: RealKube, mode: str, release: str) -> tuple[str, str]:
    """The chart's ServiceAccount and RBAC for ``mode`` (its ci/ value set, with namespace llm
    granted), applied server-side as admin: the ServiceAccount's name and a token of it from the
    TokenRequest API — what the guardian's pod would hold, never admin."""
    objects = helm_template([CHART / "ci" / f"{mode}-values.yaml"], {"namespaces[0]": "llm"}, release=release)
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    for ns in ("guardian", "llm", "other", "default"):
        kube.namespace(ns)
    out = kube.apply(rbac)
    assert out.returncode == 0, out.stderr
    (sa,) = [o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"]
    return sa, kube.token_for("guardian", sa)

"""match.kubernetes and match.systemd_unit through discovery: a fake Kubernetes API server that
checks the exact list call, a fake /proc with each process's cgroup, a fake /sys/fs/cgroup tree
and a scripted systemctl."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import discover, is_api_server
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.discovery.platform_match import PlatformMatcher
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner, result

NODE = "gpu-node-7"
UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
CID = "ab" * 32
PAUSE = "cd" * 32
SIDE = "ef" * 32


def pod(
    name: str,
    uid: str = UID,
    *,
    containers=(("vllm", CID, 8000),),
    ip: str = "10.1.2.3",
    phase: str = "Running",
    labels: dict | None = None,
) -> dict:
    return {
        "metadata": {"namespace": "llm", "name": name, "uid": uid, "labels": labels or {"app": "vllm"}},
        "spec": {
            "nodeName": NODE,
            "containers": [
                {"name": n, **({"ports": [{"name": "http", "containerPort": port}]} if port else {})}
                for n, _, port in containers
            ],
        },
        "status": {
            "phase": phase,
            "podIP": ip,
            "containerStatuses": [{"name": n, "containerID": f"containerd://{cid}"} for n, cid, _ in containers],
        },
    }


class FakeApi(BaseHTTPRequestHandler):
    pods: list = []
    seen: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.seen.append((parts.path, query))
        fields = dict(f.split("=", 1) for f in query.get("fieldSelector", "").split(",") if f)
        items = [
            p
            for p in self.pods
            if parts.path == f"/api/v1/namespaces/{p['metadata']['namespace']}/pods"
            and all(
                (p["spec"]["nodeName"] if k == "spec.nodeName" else p["metadata"]["name"]) == v
                for k, v in fields.items()
            )
            and all(
                p["metadata"]["labels"].get(k) == v
                for k, v in (kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            )
        ]
        data = json.dumps({"kind": "PodList", "items": items}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api():
    FakeApi.pods, FakeApi.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def v2(uid: str, cid: str) -> str:
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
        f"cri-containerd-{cid}.scope\n"
    )


@pytest.fixture
def node(tmp_path):
    """A node with a vLLM pod (pause + vllm serve + its engine, a sidecar) and a host process."""
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(50, 1, ("/usr/bin/containerd-shim-runc-v2",))
    tree.add_process(51, 50, ("/pause",))
    tree.set_cgroup(51, v2(UID, PAUSE))
    tree.add_process(60, 50, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"))
    tree.set_cgroup(60, v2(UID, CID))
    tree.add_process(61, 60, ("VLLM::EngineCore",))
    tree.set_cgroup(61, v2(UID, CID))
    tree.add_process(70, 50, ("envoy",))
    tree.set_cgroup(70, v2(UID, SIDE))
    tree.add_process(90, 1, ("sshd",))
    tree.set_cgroup(90, "0::/system.slice/ssh.service\n")
    return tree


def kube_cfg(**km):
    return parse_config({"autodiscover": False, "targets": [{"name": "llama", "match": {"kubernetes": km}}]})


def run(tree, cfg, api_url=None, node_name=NODE, **kw):
    kube = KubeClient(api_url, "tok", None, node_name, plain_http_loopback=True) if api_url else None
    platform = PlatformMatcher(tree.procfs(), kube=kube, is_api_server=is_api_server, **kw)
    return discover(tree.procfs(), cfg, platform=platform)


# ---------------------------------------------------------------- kubernetes
def test_a_pod_by_name_is_found_on_this_node_and_reached_at_its_pod_ip(node, api):
    FakeApi.pods = [pod("vllm-llama-0")]
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0"), api)
    (t,) = res.targets
    assert (t.key.pid, t.api_url) == (60, "http://10.1.2.3:8000")
    assert {p.pid for p in t.processes} == {60, 61}
    ((path, query),) = FakeApi.seen
    assert path == "/api/v1/namespaces/llm/pods"
    assert query == {"fieldSelector": f"spec.nodeName={NODE},metadata.name=vllm-llama-0", "limit": "500"}


def test_a_target_found_through_its_pod_carries_the_pods_namespace_and_name_to_metrics_and_alerts(node, api):
    """guardian_target_info{namespace, pod} and the alert event's target.namespace / target.pod."""
    from vllm_guardian.sinks.events import event_from_incident
    from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef

    FakeApi.pods = [pod("vllm-llama-0", labels={"app": "vllm"})]
    (t,) = run(node, kube_cfg(namespace="llm", selector="app=vllm"), api).targets
    assert (t.namespace, t.pod) == ("llm", "vllm-llama-0")
    ref = TargetRef(t.name, t.key.pid, t.key.starttime, t.port, None, None, t.namespace, t.pod)
    inc = Incident("01HZZZZZZZZZZZZZZZZZZZZZZZ", Kind.BUSY_LOOP, Severity.CRITICAL, NODE, ref, Status.FIRING, "x", 1.0)
    target = event_from_incident(inc, NODE, 1.0, reason="opened")["target"]
    assert (target["namespace"], target["pod"]) == ("llm", "vllm-llama-0")


def test_a_target_found_without_a_pod_names_none(node):
    (t,) = run(node, kube_cfg(pod_uid=UID)).targets  # by the cgroup alone: the API never asked
    assert (t.namespace, t.pod) == (None, None)


def test_a_pod_by_label_selector(node, api):
    FakeApi.pods = [pod("vllm-llama-0"), pod("other", "00000000-0000-0000-0000-000000000000", labels={"app": "x"})]
    res = run(node, kube_cfg(namespace="llm", selector="app=vllm"), api)
    assert [t.key.pid for t in res.targets] == [60]
    assert FakeApi.seen[0][1] == {"fieldSelector": f"spec.nodeName={NODE}", "labelSelector": "app=vllm", "limit": "500"}


def test_pods_of_other_nodes_are_never_asked_for(node, api):
    other = pod("vllm-llama-1")
    other["spec"]["nodeName"] = "another-node"
    FakeApi.pods = [other]
    res = run(node, kube_cfg(namespace="llm", selector="app=vllm"), api)
    assert res.unmatched == (("llama", "no running pods with labels 'app=vllm' in namespace llm on this node"),)


def test_a_named_container_of_a_multi_container_pod(node, api):
    FakeApi.pods = [pod("vllm-llama-0", containers=(("vllm", CID, 8000), ("envoy", SIDE, 15001)))]
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0", container="vllm"), api)
    (t,) = res.targets
    assert t.key.pid == 60 and t.api_url == "http://10.1.2.3:8000"


def test_without_a_container_name_the_pods_api_server_is_taken_never_pause(node, api):
    FakeApi.pods = [pod("vllm-llama-0", containers=(("vllm", CID, None), ("envoy", SIDE, None)))]
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0"), api)
    (t,) = res.targets
    assert t.key.pid == 60 and t.api_url == "http://10.1.2.3:8000"  # port from its --port


def test_a_configured_api_url_wins_over_the_pod_ip(node, api):
    FakeApi.pods = [pod("vllm-llama-0")]
    cfg = parse_config(
        {
            "autodiscover": False,
            "targets": [
                {
                    "name": "llama",
                    "api_url": "http://vllm-llama-0.vllm.llm.svc:8000",
                    "match": {"kubernetes": {"namespace": "llm", "pod": "vllm-llama-0"}},
                }
            ],
        }
    )
    assert run(node, cfg, api).targets[0].api_url == "http://vllm-llama-0.vllm.llm.svc:8000"


@pytest.mark.parametrize(
    "pods, why",
    [
        (
            [pod("a"), pod("b", "11111111-1111-1111-1111-111111111111")],
            "2 running pods with labels 'app=vllm' in namespace llm on this node (a, b): "
            "name one with match.kubernetes.pod, or narrow the selector",
        ),
        ([pod("a", phase="Pending")], "no running pods with labels 'app=vllm' in namespace llm on this node"),
        (
            [pod("a", "22222222-2222-2222-2222-222222222222", containers=(("vllm", "99" * 32, 8000),))],
            "no process of this node is in the container vllm of llm/a (uid 22222222-2222-2222-2222-222222222222): "
            "is the guardian running with hostPID?",
        ),
    ],
)
def test_what_cannot_be_matched_says_why(node, api, pods, why):
    FakeApi.pods = pods
    assert run(node, kube_cfg(namespace="llm", selector="app=vllm"), api).unmatched == (("llama", why),)


def test_without_node_name_nothing_is_listed(node, api):
    FakeApi.pods = [pod("vllm-llama-0")]
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0"), api, node_name=None)
    assert "NODE_NAME is not set" in res.unmatched[0][1] and FakeApi.seen == []


def test_without_the_api_the_reason_is_given(node):
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0"))
    assert "needs the Kubernetes API" in res.unmatched[0][1]


def test_by_pod_uid_alone_no_api_is_needed(node):
    (t,) = run(node, kube_cfg(pod_uid=UID)).targets
    assert t.key.pid == 60 and t.api_url == "http://127.0.0.1:8000"


def test_the_pod_list_is_cached_between_passes(node, api):
    FakeApi.pods = [pod("vllm-llama-0")]
    kube = KubeClient(api, "tok", None, NODE, plain_http_loopback=True)
    now = [0.0]
    platform = PlatformMatcher(node.procfs(), kube=kube, is_api_server=is_api_server, clock=lambda: now[0])
    cfg = kube_cfg(namespace="llm", pod="vllm-llama-0")
    for t in (0.0, 5.0, 11.0):
        now[0] = t
        assert discover(node.procfs(), cfg, platform=platform).targets
    assert len(FakeApi.seen) == 2  # at 0 s and after the 10 s TTL


# ---------------------------------------------------------------- systemd
UNIT = "vllm@llama.service"
CG = "/system.slice/system-vllm.slice/vllm@llama.service"


@pytest.fixture
def host(tmp_path):
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(300, 1, ("/bin/sh", "-c", "exec vllm serve m"))
    tree.add_process(301, 300, ("/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "m", "--port", "8001"))
    tree.add_process(302, 301, ("VLLM::EngineCore",))
    tree.add_process(400, 1, ("sshd",))
    for pid in (300, 301, 302):
        tree.set_cgroup(pid, f"0::{CG}\n")
    tree.set_cgroup(400, "0::/system.slice/ssh.service\n")
    return tree


def sys_cgroup(tmp_path, procs=(300, 301, 302)):
    d = tmp_path / "sys" / CG.lstrip("/")
    d.mkdir(parents=True)
    (d / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    return str(tmp_path / "sys")


def unit_cfg():
    return parse_config({"autodiscover": False, "targets": [{"name": "llama", "match": {"systemd_unit": UNIT}}]})


def systemctl(text: str, rc: int = 0) -> FakeRunner:
    return FakeRunner({("systemctl", "show"): result(text, returncode=rc)})


def test_a_unit_is_matched_through_its_cgroup_the_api_server_taken(host, tmp_path):
    runner = systemctl(f"ControlGroup={CG}\nMainPID=300\n")
    (t,) = run(host, unit_cfg(), runner=runner, sys_cgroup=sys_cgroup(tmp_path)).targets
    assert t.key.pid == 301 and t.api_url == "http://127.0.0.1:8001"
    assert runner.argvs() == [("systemctl", "show", "-p", "ControlGroup", "-p", "MainPID", "--", UNIT)]


def test_without_cgroupfs_each_process_cgroup_is_read(host, tmp_path):
    runner = systemctl(f"ControlGroup={CG}\nMainPID=300\n")
    (t,) = run(host, unit_cfg(), runner=runner, sys_cgroup=str(tmp_path / "nowhere")).targets
    assert t.key.pid == 301


@pytest.mark.parametrize(
    "runner, why",
    [
        (systemctl("ControlGroup=\nMainPID=0\n"), f"unit {UNIT} is not running (no ControlGroup)"),
        (systemctl("", rc=1), f"systemctl show {UNIT}: failed"),
        (
            FakeRunner(missing=["systemctl"]),
            "match.systemd_unit: systemctl is not available here (systemctl: not found (No such file or directory))",
        ),
    ],
)
def test_a_unit_that_cannot_be_matched_says_why(host, tmp_path, runner, why):
    assert run(host, unit_cfg(), runner=runner, sys_cgroup=str(tmp_path / "x")).unmatched == (("llama", why),)


def test_cgroups_of_processes_that_are_gone_are_not_kept(node):
    platform = PlatformMatcher(node.procfs(), is_api_server=is_api_server)
    cfg = kube_cfg(pod_uid=UID)
    discover(node.procfs(), cfg, platform=platform)
    cached = len(platform._places)
    node.remove(90)
    node.remove(70)
    discover(node.procfs(), cfg, platform=platform)
    assert len(platform._places) == cached - 2


NOT_RUNNING = "container vllm of pod llm/vllm-llama-0 is not running (no containerID)"


@pytest.mark.parametrize(
    "field, value, url, why",
    [
        ("podIP", "evil.example.com", "http://127.0.0.1:8000", None),  # a name: never followed; its --port
        ("podIP", ["10.1.2.3"], "http://127.0.0.1:8000", None),
        ("containerPort", "8000; x", "http://10.1.2.3:8000", None),  # not a port number: its --port
        ("containerPort", 70000, "http://10.1.2.3:8000", None),
        ("containerID", 123, None, NOT_RUNNING),
        ("containers", "vllm", "http://10.1.2.3:8000", None),
        ("containerStatuses", {"name": "vllm"}, None, NOT_RUNNING),
    ],
)
def test_a_pod_field_the_api_should_never_send_is_never_followed_nor_a_crash(node, api, field, value, url, why):
    """The API server's answer is hostile until bounded: a pod IP that is a name would send the
    canary (and the server's API key) wherever it points; odd types must not break discovery."""
    p = pod("vllm-llama-0")
    where = {
        "podIP": p["status"],
        "containerPort": p["spec"]["containers"][0]["ports"][0],
        "containerID": p["status"]["containerStatuses"][0],
        "containers": p["spec"],
        "containerStatuses": p["status"],
    }[field]
    where[field] = value
    FakeApi.pods = [p]
    res = run(node, kube_cfg(namespace="llm", pod="vllm-llama-0"), api)
    assert [t.api_url for t in res.targets] == ([url] if url else [])
    assert res.unmatched == ((("llama", why),) if why else ())

"""The publisher's Node side against the fake API server: the optional NodeCondition
VllmGuardianProblem follows a node-wide anomaly (most targets tripping at once), and a restart
refused for it is an Event on the pod and a NodeAnomaly Event on the Node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.surface.kube_publisher import NODE_CONDITION, KubePublisher
from vllm_guardian.testing.fake_kube_api import FakeKubeApi
from vllm_guardian.testing.fake_proc import FakeProcTree

NODE = "gpu-node-17"
UIDS = {"a": "11111111-1111-4111-8111-111111111111", "b": "22222222-2222-4222-8222-222222222222"}
ANOMALY = "node-wide anomaly: 2 of 2 targets tripped at once; suspect the node (driver, device, host)"


@dataclass
class Target:
    name: str
    pid: int
    starttime: int
    serving: bool = True
    serving_reason: str = "Serving"
    serving_message: str = "serving"
    remediation: dict[str, Any] | None = None


@dataclass
class Snapshot:
    targets: list[Target]
    incidents: list[Incident] = field(default_factory=list)


def snapshot(targets: list[Target], incidents: list[Incident] | None = None) -> Any:
    """What the publisher reads of a StatusSnapshot: its targets and open incidents."""
    return Snapshot(targets, incidents or [])


def incident(name: str, pid: int, start: int, actions=()) -> Incident:
    return Incident(
        f"inc-{name}",
        Kind.ENGINE_STALL,
        Severity.CRITICAL,
        NODE,
        TargetRef(name, pid, start),
        Status.FIRING,
        "engine stalled",
        0.0,
        actions=tuple(actions),
    )


def test_the_node_condition_follows_a_node_wide_anomaly_and_refusals_reach_pod_and_node(tmp_path):
    proc = FakeProcTree(tmp_path / "proc")
    keys = {}
    cfg = parse_config(
        {
            "node": NODE,
            "kubernetes": {"node_condition": True},
            "targets": [{"name": n, "match": {"kubernetes": {"namespace": "llm", "pod": f"vllm-{n}"}}} for n in UIDS],
        }
    )
    with FakeKubeApi(token=lambda: "tok") as api:
        for i, (name, uid) in enumerate(UIDS.items()):
            keys[name] = proc.add_process(100 + i, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"))
            proc.set_cgroup(100 + i, f"0::/kubepods/burstable/pod{uid}/c\n")
            api.state.add_pod("llm", f"vllm-{name}", uid, NODE)
        client = KubeClient(api.url, "tok", None, NODE, plain_http_loopback=True)
        pub = KubePublisher(cfg, client, proc.procfs(), lambda key: True)
        targets = [Target(n, k.pid, k.starttime) for n, k in keys.items()]
        try:
            pub.observe(snapshot(targets))
            assert pub.drain()
            assert api.state.nodes[NODE]["status"]["conditions"][0]["status"] == "False"
            refused = Action("restart", "escalated", 1.0, ANOMALY)
            pub.observe(snapshot(targets, [incident(n, k.pid, k.starttime, [refused]) for n, k in keys.items()]))
            assert pub.drain()
            (cond,) = api.state.nodes[NODE]["status"]["conditions"]
            assert (cond["type"], cond["status"], cond["reason"]) == (NODE_CONDITION, "True", "NodeAnomaly")
            events = list(api.state.events.values())
            node_events = [e for e in events if e["involvedObject"]["kind"] == "Node"]
            assert [e["reason"] for e in node_events] == ["NodeAnomaly"] and node_events[0]["count"] == 2
            pod_refusals = {e["involvedObject"]["uid"] for e in events if e["reason"] == "RestartRefused"}
            assert pod_refusals == set(UIDS.values())
            pub.observe(snapshot(targets))  # both resolved
            assert pub.drain()
            assert api.state.nodes[NODE]["status"]["conditions"][0]["status"] == "False"
            assert sum(e["reason"] == "IncidentResolved" for e in api.state.events.values()) == 2
            assert all(s.authenticated for s in api.state.seen)
        finally:
            pub.close()

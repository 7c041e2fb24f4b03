"""The guardian's own NoSchedule taint on its Node (``kubernetes.taint_on_device_fault``) against
the fake API server: added while a device fault a restart cannot help is open, every other taint
kept, only its own removed when the fault resolves; an operator's taint under the same key is
never touched; a throttle taints nothing; off, the Node is never read. Every call authenticated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from vllm_guardian.config.loader import ConfigError, parse_config
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.surface.kube_publisher import TAINT_SETTLE_S, KubePublisher
from vllm_guardian.testing.fake_kube_api import FakeKubeApi

NODE = "gpu-node-17"
KEY = "vllm-guardian.io/accel-fault"
OURS = {"key": KEY, "value": "vllm-guardian", "effect": "NoSchedule"}
OPERATOR = {"key": "maintenance", "value": "disk", "effect": "NoSchedule"}


@dataclass
class Snapshot:
    targets: list[Any] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)


def fault(device: str, severity: Severity, blocks_restart: bool) -> Incident:
    return Incident(
        f"inc-{device}",
        Kind.ACCEL_FAULT,
        severity,
        NODE,
        TargetRef(device, 0, 0),
        Status.FIRING,
        f"{device} reported Xid 79 (GPU has fallen off the bus)",
        0.0,
        {"blocks_restart": blocks_restart},
    )


LOST = fault("nvml:3", Severity.CRITICAL, True)
THROTTLED = fault("nvml:1", Severity.WARNING, False)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def publisher(api: FakeKubeApi, clock: Clock, **kube: Any) -> KubePublisher:
    cfg = parse_config({"node": NODE, "api": {"http": None}, "kubernetes": {"events": False, **kube}})
    return KubePublisher(
        cfg, KubeClient(api.url, "tok", None, NODE, plain_http_loopback=True), None, lambda key: True, monotonic=clock
    )


def step(pub: KubePublisher, *incidents: Incident) -> None:
    pub.observe(Snapshot(incidents=list(incidents)))  # type: ignore[arg-type]
    assert pub.drain()


def taints(api: FakeKubeApi) -> list[dict]:
    return api.state.nodes[NODE]["spec"].get("taints", [])


def node_calls(api: FakeKubeApi) -> list[tuple[str, str]]:
    return [(s.method, s.path) for s in api.state.seen if s.path.startswith("/api/v1/nodes")]


def test_a_blocking_fault_taints_the_node_keeping_other_taints_and_resolving_removes_only_ours():
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE, [OPERATOR])
        pub = publisher(api, clock, taint_on_device_fault=True)
        try:
            step(pub, LOST)
            assert taints(api) == [OPERATOR, OURS]
            step(pub, LOST)  # no change: nothing sent again
            assert [m for m, _ in node_calls(api)] == ["GET", "PATCH"]
            step(pub)  # resolved
            assert taints(api) == [OPERATOR]
            assert pub.status_section().node_tainted is False and pub.status_section().failures == {}
            assert all(s.authenticated for s in api.state.seen)
        finally:
            pub.close()


def test_an_operators_taint_under_the_same_key_is_neither_doubled_nor_removed():
    theirs = {"key": KEY, "value": "manual", "effect": "NoSchedule"}
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE, [theirs])
        pub = publisher(api, clock, taint_on_device_fault=True)
        try:
            step(pub, LOST)
            step(pub)
            assert taints(api) == [theirs]
            assert [m for m, _ in node_calls(api)] == ["GET", "GET"]
        finally:
            pub.close()


def test_a_throttle_taints_nothing():
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE)
        pub = publisher(api, clock, taint_on_device_fault=True)
        try:
            step(pub, THROTTLED)
            assert node_calls(api) == []  # nothing wanted yet: a stale taint waits for the settle time
            clock.t += TAINT_SETTLE_S
            step(pub, THROTTLED)
            assert taints(api) == [] and [m for m, _ in node_calls(api)] == ["GET"]
        finally:
            pub.close()


def test_a_stale_taint_of_ours_is_removed_only_after_the_settle_time():
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE, [OURS, OPERATOR])
        pub = publisher(api, clock, taint_on_device_fault=True)
        try:
            step(pub)
            assert taints(api) == [OURS, OPERATOR]
            clock.t += TAINT_SETTLE_S
            step(pub)
            assert taints(api) == [OPERATOR]
        finally:
            pub.close()


def test_off_by_default_the_node_is_never_read_or_written():
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE, [OPERATOR])
        pub = publisher(api, clock)
        try:
            step(pub, LOST)
            clock.t += TAINT_SETTLE_S
            step(pub)
            assert node_calls(api) == [] and taints(api) == [OPERATOR]
        finally:
            pub.close()


def test_a_failed_call_is_counted_logged_once_and_retried(caplog):
    clock = Clock()
    with FakeKubeApi(token=lambda: "tok") as api:  # no such Node yet: 404
        pub = publisher(api, clock, taint_on_device_fault=True)
        try:
            step(pub, LOST)
            clock.t += 1.0
            step(pub, LOST)  # within the retry pause: not sent
            clock.t += 10.0
            step(pub, LOST)
            assert pub.status_section().failures == {"TaintWant": 2}
            assert sum("TaintWant not sent" in r.getMessage() for r in caplog.records) == 1
            api.state.add_node(NODE)
            clock.t += 10.0
            step(pub, LOST)
            assert taints(api) == [OURS]
        finally:
            pub.close()


def test_a_node_changed_between_read_and_write_is_not_overwritten():
    """The write carries the version read: another writer's taint in between makes it fail (422)."""
    with FakeKubeApi(token=lambda: "tok") as api:
        api.state.add_node(NODE)
        client = KubeClient(api.url, "tok", None, NODE, plain_http_loopback=True)
        version = api.state.nodes[NODE]["metadata"]["resourceVersion"]
        api.state.nodes[NODE]["spec"]["taints"] = [OPERATOR]
        api.state.nodes[NODE]["metadata"]["resourceVersion"] = str(int(version) + 1)
        with pytest.raises(Exception, match="422"):
            client.set_node_taints(NODE, version, [OURS])
        assert taints(api) == [OPERATOR]


@pytest.mark.parametrize("key", ["", "a/b/c", "Bad_Prefix.io/x", "x" * 64, "-x", "example.com/"])
def test_a_taint_key_kubernetes_would_refuse_is_a_config_error(key):
    with pytest.raises(ConfigError, match="taint_key"):
        parse_config({"kubernetes": {"taint_on_device_fault": True, "taint_key": key}})


@pytest.mark.parametrize("key", ["vllm-guardian.io/accel-fault", "accel-fault", "nvidia.com/gpu.Broken_1"])
def test_a_valid_taint_key_is_accepted(key):
    assert parse_config({"kubernetes": {"taint_key": key}}).kubernetes.taint_key == key


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: node
contexts:
  - name: node
    context: {{cluster: local, user: guardian}}
clusters:
  - name: local
    cluster: {{server: "{url}"}}
users:
  - name: guardian
    user: {{token: tok}}
"""


@pytest.mark.parametrize("taint, built", [(True, True), (False, False)])
def test_the_taint_alone_starts_the_publisher_without_a_supervised_pod(tmp_path, monkeypatch, taint, built):
    """The taint is about the Node: no target needs to name its pod's namespace."""
    from types import SimpleNamespace

    from vllm_guardian.loop.runtime import kube_publisher

    with FakeKubeApi(token=lambda: "tok") as api:
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.format(url=api.url))
        monkeypatch.setenv("NODE_NAME", NODE)
        cfg = parse_config(
            {
                "node": NODE,
                "api": {"http": None},
                "kubernetes": {"kubeconfig": str(path), "plain_http_loopback": True, "taint_on_device_fault": taint},
            }
        )
        seams = SimpleNamespace(proc=None, control=SimpleNamespace(alive=lambda key: True))
        clock = SimpleNamespace(wall=lambda: 0.0, monotonic=Clock())
        pub = kube_publisher(cfg, seams, clock)  # type: ignore[arg-type]
        assert (pub is not None) == built
        if pub is not None:
            api.state.add_node(NODE)
            try:
                step(pub, LOST)
                assert taints(api) == [OURS] and all(s.authenticated for s in api.state.seen)
            finally:
                pub.close()

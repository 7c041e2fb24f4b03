"""Events against the fake API server, recorded the way the kubelet records them: a repeat counts
up the existing Event, many different messages with one reason are combined, each object has a
burst and then a slow refill; Events about the Node go to namespace default."""

from __future__ import annotations

import pytest

from vllm_guardian.host.kube import KubeClient
from vllm_guardian.host.kube_events import COMBINED, EventRecorder, ObjectRef
from vllm_guardian.testing.fake_kube_api import FakeKubeApi

POD = ObjectRef("Pod", "llm", "vllm-llama-0", "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71")
NODE = ObjectRef("Node", "default", "gpu-node-17", "gpu-node-17")


class Wall:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def api():
    with FakeKubeApi(token=lambda: "tok") as fake:
        yield fake


@pytest.fixture
def wall():
    return Wall()


@pytest.fixture
def recorder(api, wall):
    return EventRecorder(
        KubeClient(api.url, "tok", None, "gpu-node-17", plain_http_loopback=True), "gpu-node-17", wall=wall
    )


def test_a_repeat_counts_up_the_existing_event(api, recorder, wall):
    assert recorder.record(POD, "Warning", "BusyLoop", "spins (incident 1)") == "created"
    wall.t += 30
    assert recorder.record(POD, "Warning", "BusyLoop", "spins (incident 1)") == "repeated"
    (event,) = api.state.events.values()
    assert (event["count"], event["reason"], event["involvedObject"]["uid"]) == (2, "BusyLoop", POD.uid)
    assert event["firstTimestamp"] != event["lastTimestamp"]
    assert [s.method for s in api.state.seen] == ["POST", "PATCH"]


def test_different_messages_of_one_reason_are_combined_after_ten(api, recorder, wall):
    for i in range(12):
        wall.t += 1
        recorder.record(POD, "Warning", "RestartRefused", f"backoff {i}")
    combined = [e for e in api.state.events.values() if e["message"].startswith(COMBINED)]
    assert len(api.state.events) == 11 and len(combined) == 1
    assert combined[0]["message"] == COMBINED + "backoff 11" and combined[0]["count"] == 2


def test_each_object_has_a_burst_then_one_event_per_refill(api, wall):
    rec = EventRecorder(
        KubeClient(api.url, "tok", None, "n", plain_http_loopback=True), "n", burst=3, refill=300, wall=wall
    )
    outcomes = [rec.record(POD, "Normal", "Draining", f"m{i}") for i in range(5)]
    assert outcomes == ["created"] * 3 + ["dropped"] * 2 and rec.dropped == 2
    assert rec.record(NODE, "Warning", "NodeAnomaly", "x") == "created"  # another object, its own bucket
    wall.t += 300
    assert rec.record(POD, "Normal", "Draining", "m5") == "created"


def test_an_expired_event_is_created_anew(api, recorder):
    recorder.record(POD, "Normal", "Restarted", "ok")
    api.state.events.clear()  # the API server's event TTL passed
    assert recorder.record(POD, "Normal", "Restarted", "ok") == "created"
    assert len(api.state.events) == 1


def test_node_events_are_about_the_node_in_namespace_default(api, recorder):
    recorder.record(NODE, "Warning", "NodeAnomaly", "3 of 4 targets tripped")
    (((ns, _), event),) = api.state.events.items()
    assert ns == "default" and event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "gpu-node-17",
        "uid": "gpu-node-17",
    }

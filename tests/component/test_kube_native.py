"""The guardian as Kubernetes sees it, against the fake API server (which authenticates every
request with the token current at that moment): a vLLM pod's readiness gate condition goes
True -> False -> True across a busy loop's drain, the eviction of its pod (a PodDisruptionBudget
refuses it once) and the replacement pod's verification; the Events of the whole story are on
the pods; every call was authenticated.

The daemon is the real one, tick by tick on a fake /proc, a scripted vLLM HTTP surface and a
fake clock (as tests/component/test_daemon.py); the pod's processes end when the API server
accepted the eviction, and its controller's replacement appears under a new pod UID.
"""

from __future__ import annotations

import json

import pytest

from tests.support.kube_node import NODE, KubeNode
from vllm_guardian.host.http import HttpError
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.surface.readiness import CONDITION_TYPE
from vllm_guardian.testing.fake_http import ok
from vllm_guardian.testing.fake_kube_api import FakeKubeApi

UID_A = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
UID_B = "9c0d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
POD = ("llm", "vllm-llama-0")


def cgroup(uid: str) -> str:
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-x.scope\n"
    )


class Cluster(KubeNode):
    """One node: a vLLM pod (API server + engine) the guardian supervises, the fake API server."""

    def __init__(self, tmp_path, token_file, **config):
        self.api = FakeKubeApi(token=lambda: token_file.read_text().strip()).__enter__()
        client = KubeClient(self.api.url, None, None, NODE, token_file=str(token_file), plain_http_loopback=True)
        super().__init__(tmp_path, client, **config)
        self.start_pod(UID_A, 100)

    def start_pod(self, uid: str, api_pid: int) -> None:
        """The pod's controller (re)creates it: API server and engine, in the pod's cgroup."""
        self.api.state.add_pod(*POD, uid, NODE)
        self.run_processes(api_pid, cgroup(uid))

    def kubelet(self) -> None:
        """Once the API server accepted the eviction, the kubelet stops the pod's containers."""
        if POD not in self.api.state.pods and self.pids:
            self.stop_processes()

    def gate_history(self) -> list[tuple[str, str, str]]:
        """(pod uid, status, reason) of each readiness condition the API server accepted, in order."""
        out = []
        for s in self.api.state.seen:
            if s.method == "PATCH" and s.path.endswith("/status") and s.authenticated:
                (c,) = s.body["status"]["conditions"]
                assert c["type"] == CONDITION_TYPE
                out.append((s.body["metadata"]["uid"], c["status"], c["reason"]))
        return out

    def close(self) -> None:
        super().close()
        self.api.__exit__()


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("t0\n")
    return path


@pytest.fixture
def cluster(tmp_path, token):
    c = Cluster(tmp_path, token)
    yield c
    c.close()


def _until(cluster, predicate, limit: int, **kw) -> None:
    for _ in range(limit):
        if predicate():
            return
        cluster.step(**kw)
    assert predicate()


def test_readiness_goes_false_for_a_drain_and_restart_and_true_on_the_verified_replacement(cluster, token):
    c = cluster
    c.api.state.pdb_blocks = 1  # the budget refuses the first eviction: 429, retried with backoff
    _until(
        c,
        lambda: ("llm", "vllm-llama-0") in c.api.state.pods and c.gate_history()[-1:] == [(UID_A, "True", "Serving")],
        10,
    )
    token.write_text("t1\n")  # the projected token rotates mid-story
    c.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    _until(c, lambda: not c.pids, 60, spin=True)  # busy loop -> incident -> drain -> eviction -> pod gone
    assert any(s.path.endswith("/eviction") and s.body and s.authenticated for s in c.api.state.seen)
    assert [s.path.endswith("/eviction") for s in c.api.state.seen if s.method == "POST" and "pods" in s.path] == [
        True,
        True,
    ]  # one 429, then accepted
    c.http.route("POST", "/v1/completions", ok(json.dumps({"choices": [{"text": "x"}]})))
    c.start_pod(UID_B, 200)
    _until(c, lambda: c.gate_history()[-1:] == [(UID_B, "True", "Serving")], 60)
    history = c.gate_history()
    flips = [(uid, st) for i, (uid, st, _) in enumerate(history) if i == 0 or (uid, st) != history[i - 1][:2]]
    # warming, serving; out of rotation from the incident on; the replacement: warming, then serving
    assert flips == [(UID_A, "False"), (UID_A, "True"), (UID_A, "False"), (UID_B, "False"), (UID_B, "True")]
    assert [r for uid, st, r in history if uid == UID_B][-1] == "Serving"
    assert "IncidentOpen" not in [r for uid, st, r in history if uid == UID_B]  # resolved with the verified restart
    a_out = [r for uid, st, r in history[2:] if uid == UID_A]
    assert a_out[0] in ("IncidentOpen", "Draining") and "Draining" in a_out  # both open in one tick here
    assert all(s.authenticated for s in c.api.state.seen)
    reasons = [(e["involvedObject"]["uid"], e["reason"]) for e in c.api.state.events.values()]
    assert (UID_A, "BusyLoop") in reasons and (UID_A, "Draining") in reasons and (UID_A, "Restarting") in reasons
    assert (UID_B, "Restarted") in reasons
    busy = next(e for e in c.api.state.events.values() if e["reason"] == "BusyLoop")
    assert busy["type"] == "Warning" and "incident" in busy["message"] and busy["source"]["host"] == NODE


def test_in_observe_mode_an_open_incident_leaves_the_pod_in_rotation(tmp_path, token):
    """Dry run: the guardian acts on nothing, and taking traffic away is an action. The gate and
    GET /targets/<name>/ready agree."""
    from prometheus_client.registry import CollectorRegistry

    from vllm_guardian.surface.http_listener import HttpListener

    c = Cluster(tmp_path, token, policy={"dry_run": True})
    try:
        _until(c, lambda: c.gate_history()[-1:] == [(UID_A, "True", "Serving")], 10)
        c.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
        _until(c, lambda: bool(c.d.incidents.open_incidents()), 40, spin=True)
        c.step(3, spin=True)
        assert c.gate_history()[-1] == (UID_A, "True", "Serving")
        assert not any(s.path.endswith("/eviction") for s in c.api.state.seen)
        listener = HttpListener(
            ("127.0.0.1", 0),
            registry=CollectorRegistry(),
            status=c.d.status,
            tick_age=lambda: 0.0,
            max_tick_age=3.0,
        )
        code, doc = listener.target_ready("llama")
        assert (code, doc["ready"], doc["phase"]) == (200, True, "incident")
        reasons = [e["reason"] for e in c.api.state.events.values()]
        assert "BusyLoop" in reasons and "Draining" not in reasons
    finally:
        c.close()

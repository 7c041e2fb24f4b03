"""A hostile Kubernetes API server and a kubeconfig as a Secret writes it (the token ends in a
newline) — against a real ``guardian run`` in remediate mode beside a healthy simulated vLLM it could
restart, with every Kubernetes feature on (readiness gate, Events, the NodeCondition, the taint, a
target matched through the API), on a real Redis.

The API server (tests/support/hostile_kube_api.py) answers each call with the next of: a body
dripped a byte at a time, a Status that quotes the caller's own token with escape sequences and a
forged log line, a status line that is not HTTP, JSON nested too deep, a list that never stops
paging, a redirect to another server, a list of things that are not pods, a pod whose IP is a name.

What must hold: each call ends by its deadline and is counted (``kubernetes.failures``, the metric
``guardian_kubernetes_failures_total``); the target matched through the API is reported unmatched
with a reason, never matched to something else; the healthy server is never drained, stopped or
restarted, readiness and status answer throughout; the token reaches none of the guardian's outputs
(log, status, state dir); no log line is forged; the redirect target is never called.
"""

from __future__ import annotations

import threading
import urllib.request

from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.hostile_kube_api import HostileKubeApi, drip, echo_token, pod_list, raw, reply
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.testing.redis_server import RedisServer

NODE = "chaos-node"
TOKEN = "kube-chaos-Tok3n-7fQ2xLp9"
KUBECONFIG = """\
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
    user: {{token: "{token}\\n"}}
"""


def hostile_answers(elsewhere: str) -> list:
    named = {"metadata": {"namespace": "llm", "name": "vllm-0", "uid": "u"}, "spec": {}}
    return [
        drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"),
        echo_token(500),
        raw(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"),
        reply(200, "[" * 100_000 + "]" * 100_000),
        pod_list([], more="again"),
        reply(307, "", headers={"Location": elsewhere + "/api/v1/namespaces/llm/pods"}),
        pod_list(["not a pod", 7]),
        pod_list([{**named, "status": {"phase": "Running", "podIP": "evil.example.com"}}]),
    ]


class Watch:
    """Readiness and status polled in the background; every time either did not answer."""

    def __init__(self, g: GuardianProcess, ready_url: str) -> None:
        self.g, self.url, self.checks = g, ready_url, 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    if r.status != 200:
                        self.failures.append(f"ready {r.status}")
            except Exception as e:  # noqa: BLE001 - a 503 or no answer: both are failures here
                self.failures.append(f"ready: {e}")
            if self.g.status() is None:
                self.failures.append("status did not answer")
            self.checks += 1
            self._stop.wait(0.5)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_hostile_kubernetes_api_makes_the_guardian_do_nothing_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", NODE)
    port, http_port = free_port(), free_port()
    redis = RedisServer().start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    with HostileKubeApi([pod_list([])]) as elsewhere, HostileKubeApi(hostile_answers(elsewhere.url)) as api:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG.format(url=api.url, token=TOKEN))
        extra = {
            "node": NODE,
            "targets": [
                command_restart(port, tmp_path),
                {"name": "ghost", "match": {"kubernetes": {"namespace": "llm", "pod": "vllm-0"}}},
            ],
            "alerts": {"redis_url": redis.url},
            "api": {"http": f"127.0.0.1:{http_port}"},
            "kubernetes": {
                "kubeconfig": str(kubeconfig),
                "plain_http_loopback": True,  # the hostile server listens on loopback
                "node_condition": True,
                "taint_on_device_fault": True,
                "timeout": 1.0,
            },
        }
        g = GuardianProcess(tmp_path, port, extra=extra)
        try:
            sim.wait_ready(60)
            g.start()
            assert g.wait_ready(60), g.log_text()
            with Watch(g, f"http://127.0.0.1:{http_port}/targets/sim/ready") as watch:
                # every hostile answer served at least twice, each call ended and counted
                assert poll(lambda: len(api.seen) >= 16, 120), (len(api.seen), g.log_text())
                failed = poll(
                    lambda: (
                        (st := g.status())
                        and sum((st.get("kubernetes") or {}).get("failures", {}).values()) >= 2
                        and st
                    ),
                    60,
                )
                assert failed, (g.status() or {}).get("kubernetes")
            status = g.status()
            assert status is not None
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
                metrics = r.read().decode()

            # bounded and counted; the target matched through the API says why it is not matched
            assert "guardian_kubernetes_failures_total" in metrics
            ghost = [u for u in status.get("unmatched", []) if "ghost" in str(u)]
            assert ghost, status.get("unmatched")
            assert "evil.example.com" not in str(status["targets"])

            # no wrong action: readiness and status answered throughout, the same server serves
            assert watch.checks >= 5 and watch.failures == [], watch.failures[:5]
            t = g.require_target()
            assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t.get("remediation")
            assert sims_on(port) == [sim.pid]
            for inc in g.incidents():
                assert not [a for a in inc["actions"] if a["name"] in ("drain", "stop", "start", "restart")], inc
            assert g.proc is not None and g.proc.poll() is None  # still running

            # the token reached no output, no line was forged, the redirect led nowhere
            log = g.log_text()
            assert "bad credentials" in log  # the echoing Status was logged ...
            written = "".join(p.read_text(errors="replace") for p in g.state_dir.rglob("*") if p.is_file())
            assert TOKEN not in log and TOKEN not in str(status) and TOKEN not in written  # ... without the token
            assert not [line for line in log.splitlines() if line.startswith("FORGED")]
            assert "\x1b" not in log
            assert elsewhere.seen == []
            assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in api.seen)  # newline stripped
        finally:
            g.stop()
            sim.stop()
            redis.stop()
            sweep(port)

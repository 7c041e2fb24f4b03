"""Tells the Kubernetes API what the guardian sees, off the loop: the readiness gate condition
``vllm-guardian.io/serving`` on each supervised pod, Events on the pods and the Node, and the
optional NodeCondition ``VllmGuardianProblem`` (a node-wide anomaly, or a device with a fault a
restart cannot help: an open critical ``accel_fault``), and the optional ``NoSchedule`` taint
``kubernetes.taint_key`` on this Node while such a fault is open (``node_taint`` decides the list:
other taints are kept, only the guardian's own is ever removed). A stale taint of the guardian's
found at start is removed only after ``TAINT_SETTLE_S``, once the telemetry's first reads had
the chance to see the fault again.

The loop calls ``observe(snapshot)`` after each tick: ``kube_plan.plan`` decides (pure), and
what changed is queued for one worker thread, which finds each process's pod — its pod UID
from ``/proc/<pid>/cgroup`` while the pid still is that process, then that UID among this
node's pods in the target's namespace (cached per process) — and patches or posts. A gate
condition is sent when it differs from what the API server last accepted for that pod
(``lastTransitionTime`` moves only when its status flips); a failed call is logged once per
episode and retried after ``RETRY_S``. Targets are supervised pods when the config names their
namespace (``match.kubernetes.namespace`` or ``restart.namespace``); others get nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from vllm_guardian.host.kube import KubeClient, PodRef, pod_uid_of
from vllm_guardian.host.kube_events import EventRecorder, ObjectRef, rfc3339
from vllm_guardian.model import ProcKey
from vllm_guardian.remediation.policy import node_anomaly
from vllm_guardian.surface import node_taint
from vllm_guardian.surface.kube_plan import EventWant, GateWant, PlanState, plan
from vllm_guardian.surface.kube_status import KubernetesStatus
from vllm_guardian.surface.readiness import CONDITION_TYPE

if TYPE_CHECKING:
    from vllm_guardian.config.schema import Config
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

NODE_CONDITION = "VllmGuardianProblem"
RETRY_S = 10.0
QUEUE_MAX = 1000
TAINT_SETTLE_S = 30.0


def supervised_namespaces(cfg: Config) -> dict[str, str]:
    """target name -> the namespace its pod is looked up in."""
    out = {}
    for t in cfg.targets:
        km = t.match.kubernetes
        ns = (km.namespace if km is not None else None) or (
            t.restart.namespace if t.restart.mode == "kubernetes" else None
        )
        if ns:
            out[t.name] = ns
    return out


@dataclass(frozen=True)
class _NodeWant:
    problem: bool
    message: str


@dataclass(frozen=True)
class _TaintWant:
    tainted: bool


class KubePublisher:
    def __init__(
        self,
        cfg: Config,
        client: KubeClient,
        procfs: Any,
        alive: Callable[[ProcKey], bool],
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
    ) -> None:
        self.cfg, self.client, self.procfs, self.alive = cfg, client, procfs, alive
        self.wall, self.monotonic = wall, monotonic
        self.log = log or logging.getLogger("guardian.kube")
        self.node = client.node_name or cfg.node or ""
        self.namespaces = supervised_namespaces(cfg)
        k = cfg.kubernetes
        self.recorder = EventRecorder(
            client, self.node, burst=k.event_burst, refill=k.event_refill, wall=wall, log=self.log
        )
        self._state = PlanState()
        self._queue: queue.Queue[tuple[object, object]] = queue.Queue(QUEUE_MAX)
        self._lock = threading.Lock()
        self._applied: dict[tuple[str, tuple[int, int]], tuple[bool, str, str]] = {}  # accepted by the API server
        self._queued: set[tuple[str, tuple[int, int]]] = set()
        self._failed_at: dict[object, float] = {}
        self._status_since: dict[tuple[str, tuple[int, int]], tuple[bool, str]] = {}
        self._pods: dict[tuple[int, int], PodRef] = {}
        self._node_applied: _NodeWant | None = None
        self._taint_applied: _TaintWant | None = None
        self._started = monotonic()
        self.failures: dict[str, int] = {}  # API calls that failed, by what was sent
        self._errors: set[str] = set()
        self.queue_full = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ---------------------------------------------------------------- the loop's side
    def observe(self, snapshot: StatusSnapshot) -> None:
        """After a tick: queue what changed (never blocks, never raises into the loop)."""
        gates, events, self._state = plan(snapshot, self._state)
        now = self.monotonic()
        if self.cfg.kubernetes.readiness_gate:
            for g in gates:
                slot = (g.target, g.key)
                if g.target not in self.namespaces:
                    continue
                with self._lock:
                    same = slot in self._queued or self._applied.get(slot) == (g.serving, g.reason, g.message)
                if not same and now - self._failed_at.get(slot, -RETRY_S) >= RETRY_S:
                    self._put(g, slot)
        if self.cfg.kubernetes.events:
            for e in events:
                if e.target is None or e.target in self.namespaces:
                    self._put(e)
        if self.cfg.kubernetes.node_condition:
            want = self._node_want(snapshot)
            if want != self._node_applied and now - self._failed_at.get("node", -RETRY_S) >= RETRY_S:
                self._put(want, "node")
        if self.cfg.kubernetes.taint_on_device_fault:
            taint = _TaintWant(bool(_broken_devices(snapshot)))
            settled = taint.tainted or self._taint_applied is not None or now - self._started >= TAINT_SETTLE_S
            if settled and taint != self._taint_applied and now - self._failed_at.get("taint", -RETRY_S) >= RETRY_S:
                self._put(taint, "taint")

    def status_section(self) -> KubernetesStatus:
        """The status's ``kubernetes`` section."""
        applied = self._taint_applied
        return KubernetesStatus(dict(self.failures), self.queue_full, None if applied is None else applied.tainted)

    def _node_want(self, snapshot: StatusSnapshot) -> _NodeWant:
        """A problem when many servers trip at once, or a device has a fault a restart cannot help
        (an open accel_fault rated critical with ``blocks_restart``: the node needs a human)."""
        broken = _broken_devices(snapshot)
        if broken:
            return _NodeWant(True, "; ".join(i.summary for i in broken)[:1024])
        tripped = len(
            {
                i.target.name
                for i in snapshot.incidents
                if i.severity.value == "critical" and i.kind.value != "accel_fault"
            }
        )
        anomaly = node_anomaly(self.cfg.policy, tripped, len(snapshot.targets))
        return _NodeWant(anomaly is not None, anomaly or "no node-wide anomaly")

    def _put(self, item: object, slot: object = None) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="guardian-kube", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((item, slot))
        except queue.Full:
            self.queue_full += 1
            return
        if isinstance(slot, tuple):
            with self._lock:
                self._queued.add(slot)

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            try:
                self._queue.put_nowait((None, None))
            except queue.Full:
                pass
            self._thread.join(timeout)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued was sent (tests, shutdown); False on timeout."""
        deadline = self.monotonic() + timeout
        while self.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    # ---------------------------------------------------------------- the worker
    def _work(self) -> None:
        while not self._stop.is_set():
            item, slot = self._queue.get()
            try:
                if item is None:
                    return
                self._send(item)
                self._failed_at.pop(slot if slot is not None else id(item), None)
                self._errors.discard(type(item).__name__)
            except Exception as e:  # noqa: BLE001 - an API outage must not end the worker: logged once, retried
                if slot is not None:
                    self._failed_at[slot] = self.monotonic()
                name = type(item).__name__
                self.failures[name.strip("_")] = self.failures.get(name.strip("_"), 0) + 1
                if name not in self._errors:
                    self._errors.add(name)
                    self.log.warning("kubernetes: %s not sent: %s (retried; logged once until it works)", name, e)
            finally:
                if isinstance(slot, tuple):
                    with self._lock:
                        self._queued.discard(slot)
                self._queue.task_done()

    def _send(self, item: object) -> None:
        if isinstance(item, GateWant):
            self._send_gate(item)
        elif isinstance(item, EventWant):
            self._send_event(item)
        elif isinstance(item, _NodeWant):
            self._send_node(item)
        elif isinstance(item, _TaintWant):
            self._send_taint(item)

    def _pod(self, target: str, key: tuple[int, int]) -> PodRef:
        pod = self._pods.get(key)
        if pod is None:
            uid = pod_uid_of(self.procfs, ProcKey(*key), self.alive)
            if uid is None:
                raise RuntimeError(f"{target}: pid {key[0]} is not in a Kubernetes pod")
            pod = self.client.find_pod(uid, self.namespaces[target])
            if len(self._pods) > 256:
                self._pods.clear()
            self._pods[key] = pod
        return pod

    def _send_gate(self, g: GateWant) -> None:
        slot = (g.target, g.key)
        pod = self._pod(g.target, g.key)
        since = self._status_since.get(slot)
        if since is None or since[0] != g.serving:
            since = (g.serving, rfc3339(self.wall()))
        condition = {
            "type": CONDITION_TYPE,
            "status": "True" if g.serving else "False",
            "reason": g.reason,
            "message": g.message,
            "lastProbeTime": None,
            "lastTransitionTime": since[1],
        }
        self.client.patch_pod_condition(pod, condition)
        self._status_since[slot] = since
        with self._lock:
            self._applied[slot] = (g.serving, g.reason, g.message)

    def _send_event(self, e: EventWant) -> None:
        if e.target is None or e.key is None:
            obj = ObjectRef("Node", "default", self.node, self.node)
        else:
            pod = self._pod(e.target, e.key)
            obj = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        self.recorder.record(obj, e.type, e.reason, e.message)

    def _send_node(self, n: _NodeWant) -> None:
        condition = {
            "type": NODE_CONDITION,
            "status": "True" if n.problem else "False",
            "reason": "NodeAnomaly" if n.problem else "NoProblem",
            "message": n.message,
            "lastHeartbeatTime": rfc3339(self.wall()),
            "lastTransitionTime": rfc3339(self.wall()),
        }
        self.client.patch_node_condition(self.node, condition)
        self._node_applied = n

    def _send_taint(self, t: _TaintWant) -> None:
        """Read the Node, write its taints with ours added (or ours removed) unless that changes
        nothing; the write holds only if the Node did not change since the read (else retried)."""
        if not self.node:
            raise RuntimeError("the node name is unknown (NODE_NAME unset): no taint")
        key = self.cfg.kubernetes.taint_key
        version, taints = node_taint.node_taints(self.client.read_node(self.node))
        new = node_taint.with_taint(taints, key) if t.tainted else node_taint.without_taint(taints, key)
        if new is not None:
            self.client.set_node_taints(self.node, version, new)
            self.log.warning(
                "kubernetes: node %s %s %s=%s:%s",
                self.node,
                "tainted" if t.tainted else "untainted",
                key,
                node_taint.VALUE,
                node_taint.EFFECT,
            )
        self._taint_applied = t


def _broken_devices(snapshot: StatusSnapshot) -> list[Any]:
    """The open accel_fault incidents whose fault a restart cannot help: rated critical by the
    catalog, or ruled ``taint`` by ``policy.device_fault_rules`` (a ``refuse_restart`` rule never taints)."""
    return [
        i
        for i in snapshot.incidents
        if i.kind.value == "accel_fault" and i.signals.get("blocks_restart") and _taints(i.severity.value, i.signals)
    ]


def _taints(severity: str, signals: Mapping[str, Any]) -> bool:
    """A configured rule taints only with ``taint``; without one, the catalog's critical blocking fault."""
    rule = signals.get("rule") or ""
    return rule == "taint" if rule else severity == "critical"

"""``restart.mode: kubernetes``: delete the API server's pod and let its controller recreate it.

The pod is the one the API server ran in when the sequence began (its UID read from the process's
cgroup then, identity-checked: never a reused pid's pod), deleted with a UID precondition and the
stop grace. The kubelet stops the containers, not the guardian; if the deletion fails the machine
still SIGKILLs the snapshotted tree after the grace. Needs the in-cluster API (a service account):
without it a restart is refused (alert only).
"""

from __future__ import annotations

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.host.kube import pod_uid_of
from vllm_guardian.model import ProcKey
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.remediation.methods.base import MethodContext, SignalStop, StartStep, StopSent
from vllm_guardian.remediation.sequence import RestartSequence

JOB = "kube"


class KubernetesMethod(SignalStop):
    name = "kubernetes"

    def refusal(self, rc: RestartConfig, ctx: MethodContext) -> Refusal | None:
        if ctx.kube is None:
            return Refusal("restart.mode kubernetes needs the in-cluster API (service account); alert only", "no_kube")
        return None

    def begin(self, seq: RestartSequence, ctx: MethodContext) -> None:
        """The API server's pod UID while it still is the snapshotted process (None when unreadable)."""
        if ctx.procfs is None:
            return
        try:
            seq.pod_uid = pod_uid_of(ctx.procfs, seq.api_key, ctx.control.alive)
        except Exception as e:  # noqa: BLE001 - read again, identity-checked, at delete time
            ctx.log.warning("remediation: pod of pid %d not recorded: %s", seq.api_key.pid, e)

    def stop(self, seq: RestartSequence, rc: RestartConfig, grace: float, now: float, ctx: MethodContext) -> StopSent:
        kube = ctx.kube
        if kube is None:  # a manual restart without the API: SIGTERM, like signal mode
            return super().stop(seq, rc, grace, now, ctx)
        api, uid, namespace = seq.api_key, seq.pod_uid, rc.namespace

        def delete() -> object:
            return self._delete(ctx, api, int(grace), uid, namespace)

        ctx.submit(seq, JOB, delete, now, deadline=now + 30)
        return StopSent("ok", f"pod delete requested (grace {grace:g}s) {uid or ''}")

    @staticmethod
    def _delete(ctx: MethodContext, api: ProcKey, grace: int, uid: str | None, namespace: str | None) -> object:
        """Delete the pod recorded when the sequence began; without a record, the pod of the API
        server only while its pid still is the snapshotted process (never a reused pid's pod)."""
        assert ctx.kube is not None
        if uid is None and ctx.procfs is not None:
            uid = pod_uid_of(ctx.procfs, api, ctx.control.alive)
        if uid is None:
            raise RuntimeError(f"pid {api.pid} is not in a Kubernetes pod (no pod UID in its cgroup)")
        pod = ctx.kube.find_pod(uid, namespace)
        ctx.kube.delete_pod(pod, grace)
        return pod

    def stop_failed(self, seq: RestartSequence, ctx: MethodContext) -> str | None:
        res = ctx.take(seq, JOB)
        if res is None or res.error is None:
            return None
        return f"pod delete failed: {res.error}; SIGKILL after stop_timeout"

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        return StartStep("verify", "waiting for the controller to recreate the pod")

"""``restart.mode: kubernetes``: remove the API server's pod and let its controller recreate it.

The pod is the one the API server ran in when the sequence began (its UID read from the process's
cgroup then, identity-checked: never a reused pid's pod). It is evicted (PodDisruptionBudgets
hold; a refusal is retried within the target's drain timeout, ``remediation.kube_removal``) or
deleted when ``kubernetes.pod_removal: delete`` says so, with a UID precondition and the stop grace.
The kubelet stops the containers, not the guardian: no SIGKILL while the eviction waits on a
budget, and an eviction still refused fails the sequence with nothing stopped. A removal the API
server refused with any other answer (403, 404/409/422, no Eviction API) fails it the same way; only
one it could not answer (unreachable, timeout, 5xx) leaves the machine to SIGKILL the snapshotted
tree after the grace (``kube_removal.falls_back``). Needs the
in-cluster API (a service account): without it a restart is refused (alert only).
"""

from __future__ import annotations

from vllm_guardian.config.schema import DrainConfig, RestartConfig
from vllm_guardian.host.kube import EvictionBlocked, pod_uid_of
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.remediation.kube_removal import falls_back, pod_of, remove_pod
from vllm_guardian.remediation.methods.base import (
    NO_NEWS,
    MethodContext,
    SignalStop,
    StartStep,
    StopNews,
    StopSent,
)
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
        procfs, alive, log = ctx.procfs, ctx.control.alive, ctx.log
        removal = ctx.settings.pod_removal
        spec = ctx.settings.targets.get(seq.target)
        budget = spec.drain.timeout if spec is not None else DrainConfig().timeout

        def remove() -> str:
            pod = pod_of(kube, procfs, api, alive, uid, namespace)
            return remove_pod(kube, pod, int(grace), removal, budget, log=log).describe()

        ctx.submit(seq, JOB, remove, now, deadline=now + budget + 60)
        seq.progress.kube_pending = True
        what = "eviction" if removal == "evict" else "delete"
        return StopSent("ok", f"pod {what} requested (grace {grace:g}s) {uid or ''}")

    def stop_news(self, seq: RestartSequence, ctx: MethodContext) -> StopNews:
        res = ctx.take(seq, JOB)
        if res is None:
            return StopNews(hold_kill=seq.progress.kube_pending)
        seq.progress.kube_pending = False
        if isinstance(res.error, EvictionBlocked):  # never stop it behind its disruption budget's back
            return StopNews(fail=f"{res.error}: nothing was stopped; a person decides")
        if res.error is not None and not falls_back(res.error):  # an answer: RBAC, a replaced pod, no API
            return StopNews(fail=f"pod removal refused: {res.error}: nothing was stopped; a person decides")
        if res.error is not None:  # no answer (unreachable, timeout, 5xx): stop the verified tree
            return StopNews(("failed", f"pod removal failed: {res.error}; SIGKILL after stop_timeout"))
        if res.value is not None:
            return StopNews(("ok", str(res.value)))
        return NO_NEWS

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        return StartStep("verify", "waiting for the controller to recreate the pod")

"""``restart.mode: kubernetes``: remove the pod of the target's API server so its controller
recreates it — by eviction (policy/v1: PodDisruptionBudgets hold), or a delete when
``kubernetes.pod_removal: delete`` says so; both with the pod's UID as a precondition.

Runs off the loop (a remediation job). Decides: the pod (the UID recorded when the sequence
began, else read now from ``/proc/<pid>/cgroup`` while the pid still is the snapshotted
process); when an eviction is refused with 429 (a budget allows no disruption now), it waits
with backoff (2 s doubling to 30 s) and tries again until ``budget_s`` (the target's drain
timeout) is spent, logging each refusal, then gives up with ``EvictionBlocked``: nothing is
stopped behind the budget's back.

When a removal fails for another reason, ``falls_back`` decides (docs/remediation.md, "When an
eviction fails"): only an API server that could not answer (unreachable, timed out, 5xx) lets
the method stop the snapshotted processes itself after ``stop_timeout`` — the same verified tree
every other restart method stops, and the kubelet restarts the container. Every answer the server
did give (403: RBAC does not allow it; 404/409/422: the pod is gone or is no longer the recorded
UID; 429: a budget; no Eviction API) is a decision or a fact the guardian must not override: it
escalates and stops nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from vllm_guardian.host.kube import EvictionBlocked, KubeClient, PodRef, pod_uid_of
from vllm_guardian.host.kube_http import ApiError
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcKey

BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 30.0


@dataclass(frozen=True)
class Removal:
    pod: PodRef
    method: str  # evict | delete
    refusals: int  # 429s before it was accepted
    waited: float  # seconds spent waiting on them

    def describe(self) -> str:
        what = f"pod {self.pod.namespace}/{self.pod.name} {'evicted' if self.method == 'evict' else 'deleted'}"
        if self.refusals:
            what += f" after {self.refusals} refusal(s) by a PodDisruptionBudget over {self.waited:.0f}s"
        return what


def remove_pod(
    kube: KubeClient,
    pod: PodRef,
    grace: int,
    method: str,
    budget_s: float,
    *,
    sleep: Callable[[float], None] | None = None,
    monotonic: Callable[[], float] | None = None,
    log: logging.Logger | None = None,
) -> Removal:
    log = log or logging.getLogger("guardian.remediation")
    sleep, monotonic = sleep or time.sleep, monotonic or time.monotonic
    if method == "delete":
        kube.delete_pod(pod, grace)
        return Removal(pod, method, 0, 0.0)
    start, wait, refusals = monotonic(), BACKOFF_FIRST_S, 0
    while True:
        try:
            kube.evict_pod(pod, grace)
            return Removal(pod, method, refusals, monotonic() - start)
        except EvictionBlocked as e:
            refusals += 1
            spent = monotonic() - start
            left = budget_s - spent
            if left <= 0:
                raise EvictionBlocked(
                    f"{e}; still refused after {refusals} tries over {spent:.0f}s (drain timeout {budget_s:g}s)",
                    e.code,
                    e.message,
                ) from None
            pause = min(wait, left, e.retry_after or wait)
            log.warning(
                "remediation: eviction of %s/%s refused by a PodDisruptionBudget (%s); retrying in %.0fs, %.0fs left",
                pod.namespace,
                pod.name,
                e.message or "429",
                pause,
                left,
            )
            sleep(pause)
            wait = min(wait * 2, BACKOFF_MAX_S)


def falls_back(error: BaseException) -> bool:
    """True when a failed pod removal may fall back to stopping the snapshotted processes: the API
    server gave no answer (a transport failure, a timeout) or a server error (5xx). False for every
    answer it did give (4xx, including a budget's 429 and no Eviction API): escalate instead."""
    if isinstance(error, ApiError):
        return error.code >= 500
    return True


def pod_of(
    kube: KubeClient,
    procfs: ProcFS | None,
    api: ProcKey,
    alive: Callable[[ProcKey], bool],
    uid: str | None,
    namespace: str | None,
) -> PodRef:
    """The pod recorded when the sequence began; without a record, the pod of the API server only
    while its pid still is the snapshotted process (never a reused pid's pod)."""
    if uid is None and procfs is not None:
        uid = pod_uid_of(procfs, api, alive)
    if uid is None:
        raise RuntimeError(f"pid {api.pid} is not in a Kubernetes pod (no pod UID in its cgroup)")
    return kube.find_pod(uid, namespace)

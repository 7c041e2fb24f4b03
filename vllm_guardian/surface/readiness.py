"""Should a target take traffic now, and why not? One verdict for ``GET /targets/<name>/ready``
and the Kubernetes readiness gate (the pod condition ``vllm-guardian.io/serving``).

Pure. Reads what the status view knows of one target: the remediation phase, the remediator's
own verdict (a drain in progress or by hand, a failed restart), whether its API server is alive
and warmed up (answered a canary), and the open incident that takes it out, if any. The
responder names such an incident only in remediate mode (``policy.dry_run`` false) and only for
an incident the guardian will act on (its detector's mode is ``remediate``, a configured target):
in observe mode an incident changes nothing — the guardian acts on nothing, and taking traffic
away is an action. A server that says it is paused or asleep on purpose (``/is_paused``,
``/is_sleeping``) is not serving (``Paused`` / ``Sleeping``): that is its own word, not an action.
"""

from __future__ import annotations

from dataclasses import dataclass

CONDITION_TYPE = "vllm-guardian.io/serving"
_RESTARTING = {"draining": "Draining", "stopping": "Stopping", "starting": "Starting", "verifying": "Verifying"}


@dataclass(frozen=True)
class Readiness:
    serving: bool
    reason: str  # CamelCase, as Kubernetes condition reasons are
    message: str


def readiness(
    target: str,
    *,
    phase: str,
    remediator_serving: bool,
    api_alive: bool,
    ready: bool,
    takes_out: tuple[str, str] | None = None,  # (incident kind, incident id)
    incident_id: str | None = None,  # the remediation's incident
    hold: str | None = None,  # "paused" / "sleeping" on purpose, as the server says
) -> Readiness:
    about = f" (incident {incident_id})" if incident_id else ""
    if phase in _RESTARTING:
        msg = f"{target}: remediation {phase}{about}; serving again once verified"
        return Readiness(False, _RESTARTING[phase], msg)
    if not remediator_serving:
        if phase == "failed":
            return Readiness(False, "RestartFailed", f"{target}: the restart failed{about}; a person must look")
        return Readiness(False, "Drained", f"{target}: drained by request; `guardian undrain {target}` ends it")
    if not api_alive:
        return Readiness(False, "NotServing", f"{target}: its API server is gone")
    if not ready:
        return Readiness(False, "Warming", f"{target}: not yet answered a canary")
    if hold is not None:
        return Readiness(False, hold.capitalize(), f"{target}: {hold} on purpose (the server says so)")
    if takes_out is not None:
        kind, iid = takes_out
        return Readiness(False, "IncidentOpen", f"{target}: {kind} incident {iid} open; remediation follows")
    return Readiness(True, "Serving", f"{target}: serving")

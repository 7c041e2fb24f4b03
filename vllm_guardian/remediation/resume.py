"""A guardian restarted mid-sequence: where it is safe to pick a sequence up again. Pure.

Never a second start: a sequence that may have issued its start only verifies. Nothing disruptive
done yet (lease, draining): taken up again from the fleet lease, unless the API server is gone
meanwhile (aborted). Stopping or releasing: resumed (signals are identity-checked).
"""

from __future__ import annotations

from vllm_guardian.remediation.sequence import Outcome, Phase, PhaseProgress, RestartSequence


def resume(seq: RestartSequence, server_alive: bool, now: float, wall: float) -> bool:
    """Set ``seq`` up to go on in this process; True when it was aborted instead (its fleet lease is
    to be released and the target undrained)."""
    seq.phase_since = now
    seq.pending_job = None
    early = seq.phase in (Phase.LEASE, Phase.DRAINING)
    if early and not server_alive:  # the server changed while the guardian was down: nothing to resume
        pid = seq.api_key.pid
        seq.end(
            Outcome.ABORTED, f"guardian restarted before the stop and API server {pid} is gone; aborted, lease released"
        )
        return True
    if early:  # take the lease again (ours is kept) and drain again
        seq.phase = Phase.LEASE
        seq.lease_waiting_noted = False
        seq.history.append(PhaseProgress(Phase.LEASE, wall))
        seq.detail = "guardian restarted before the stop; resuming from the fleet lease"
    elif seq.phase is Phase.STARTING and seq.history and not seq.progress.start_issued:
        # still waiting for the owner (nothing was started): wait again, then decide
        seq.history.append(PhaseProgress(Phase.STARTING, wall))
        seq.detail = "guardian restarted before the start was issued; checking for the owner again"
    elif seq.phase is Phase.STARTING:  # the start may have been issued: never twice; wait for it
        seq.phase = Phase.VERIFYING
        seq.detail = "guardian restarted during start; verifying without starting again"
    elif seq.phase in (Phase.STOPPING, Phase.RELEASING):
        seq.history.append(PhaseProgress(seq.phase, wall, begun=True))
        seq.detail = f"guardian restarted during {seq.phase.value}; resuming"
    return False

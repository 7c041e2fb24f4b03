"""Before a restart takes anything down (the ``lease`` phase, docs/policy.md): the pre-restart device
check, the percentage breaker, then the fleet-wide cap — in that order, in one off-loop job (each may
block: a device command, Redis), its answer one typed ``Admission``.

- the device check failing refuses the restart for good (``refused``): the sequence ends, escalated;
- the breaker holding it (``held``) or the cap being reached leaves it waiting, asked again later;
  the one guardian of the fleet whose refusal trips the breaker gets ``page``: what is held;
- a device check that passed is not run again while the sequence waits (``device_ok``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vllm_guardian.policy.breaker import BreakerResult
from vllm_guardian.policy.device_check import DeviceCheck
from vllm_guardian.remediation.lease import LeaseResult


@dataclass(frozen=True)
class Admission:
    granted: bool
    reason: str
    refused: str | None = None  # the device check refused the restart: end the sequence, escalate
    held: bool = False  # the breaker holds it (no lease asked)
    page: tuple[str, ...] = ()  # this refusal tripped the breaker: page once with what is held
    slot: int | None = None  # the fleet lease slot taken
    token: int | None = None  # its fence token (checked before the stop)
    device_ok: bool = False  # the device check ran and passed (or there was nothing to check)


def admit(
    *,
    device: Callable[[], DeviceCheck] | None,
    breaker: Callable[[], BreakerResult] | None,
    lease: Callable[[], LeaseResult] | None,
) -> Admission:
    """Run the checks that are given (None: not asked), stopping at the first that says no."""
    notes: list[str] = []
    if device is not None:
        check = device()
        if not check.ok:
            why = "; ".join(check.reasons)
            return Admission(False, f"pre-restart device check failed: {why}", refused=why)
        notes.append(f"device check passed ({', '.join(check.checked) or 'command only'})")
    if breaker is not None:
        b = breaker()
        if not b.granted:
            return Admission(False, b.reason, held=True, page=b.page, device_ok=True)
        notes.append(b.reason)
    slot = token = None
    if lease is not None:
        got = lease()
        if not got.granted:
            return Admission(False, got.reason, device_ok=True)
        slot, token = got.slot, got.token
        notes.append(got.reason)
    return Admission(True, "; ".join(notes) or "no fleet lease configured", slot=slot, token=token, device_ok=True)

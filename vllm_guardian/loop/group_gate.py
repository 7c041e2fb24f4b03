"""One actor per group: a restart of a group member needs the group's lease as well as a fleet slot.

Wraps the fleet lease (``remediation/lease.FleetLease``, same ``acquire``/``renew``/``release``)
for the restart sequence's lease phase. For a target that is a member of a group spread over
nodes (``group_of`` names its group; None: not in one), ``acquire`` first takes the group lease
(``sinks/group_lease.GroupLease``: one Lua script, fenced), then the fleet slot; while
another node holds the group lease the sequence waits, saying who holds it (the other node acts;
this one contributes its evidence), and a restart refused a fleet slot gives the group lease back.
A member whose restart the lease holder asked for (``delegate``: a signed, believed request) is a
step of the holder's group action: it takes neither lease (the holder holds the group's one slot).
``release`` gives both back. Redis errors on the group lease deny (never two actors on a group):
the sequence waits and, past its limits, escalates as a fleet lease refusal does.
"""

from __future__ import annotations

from collections.abc import Callable

from vllm_guardian.remediation.lease import FleetLease, LeaseResult
from vllm_guardian.sinks.group_lease import GroupLease


class GroupGate:
    """A ``FleetLease`` that also holds the group lease of a group member's restart."""

    def __init__(
        self, fleet: FleetLease, groups: GroupLease, group_of: Callable[[str], str | None], ttl: float
    ) -> None:
        self.fleet, self.groups, self.group_of, self.ttl = fleet, groups, group_of, ttl
        self._held: dict[str, str] = {}  # target -> the group whose lease its sequence holds
        self._delegated: dict[str, str] = {}  # target -> the group whose lease holder asked for its restart

    def delegate(self, target: str, group: str) -> None:
        """The group's lease holder asked (signed, believed) for ``target``'s restart: it acts through this node."""
        self._delegated[target] = group

    def acquire(self, target: str) -> LeaseResult:
        group = self._held.get(target) or self.group_of(target)
        if group is not None and self._delegated.get(target) == group:
            # one step of the group action the lease holder runs: it holds the group's one fleet slot
            return LeaseResult(True, f"asked by the holder of the group lease of {group} (its fleet slot)", None)
        if group is not None:
            try:
                mine = self.groups.acquire(group, self.ttl)
                holder = None if mine else self.groups.holder(group)
            except Exception as e:  # noqa: BLE001 - redis down or slow: deny, never two actors on a group
                return LeaseResult(False, f"group lease of {group} not checked ({type(e).__name__}); denied")
            if not mine:
                who = holder or "another node"
                return LeaseResult(False, f"group {group} is being acted on by {who} (group lease)")
            self._held[target] = group
        got = self.fleet.acquire(target)
        if not got.granted and group is not None:
            self._give_back(target)
            return got
        reason = f"{got.reason}; group lease of {group}" if group else got.reason
        return LeaseResult(got.granted, reason, got.slot, got.token)

    def check(self, target: str, slot: int | None, token: int | None) -> LeaseResult:
        """Before the stop: the group lease (when this sequence holds one) and the fleet slot, each
        still ours with the token it was granted under (a failover may have handed either over)."""
        group = self._held.get(target)
        if group is not None:
            try:
                ours = self.groups.check(group)
            except Exception as e:  # noqa: BLE001 - redis down or slow: not ours, never two actors
                return LeaseResult(False, f"group lease of {group} not checked ({type(e).__name__})", slot, token)
            if not ours:
                return LeaseResult(False, f"group lease of {group} lost (a failover or an expiry)", slot, token)
        return self.fleet.check(target, slot, token)

    def renew(self, target: str, slot: int | None, token: int | None = None) -> bool:
        group = self._held.get(target)
        if group is not None:
            try:
                if not self.groups.renew(group, self.ttl):
                    return False
            except Exception:  # noqa: BLE001 - any Redis failure: not renewed
                return False
        return self.fleet.renew(target, slot, token)

    def release(self, target: str, slot: int | None, token: int | None = None) -> bool:
        self._delegated.pop(target, None)
        self._give_back(target)
        return self.fleet.release(target, slot, token)

    def holding(self) -> dict[str, str]:
        """target -> group, of the group leases this node holds now."""
        return dict(self._held)

    def _give_back(self, target: str) -> None:
        group = self._held.pop(target, None)
        if group is not None:
            try:
                self.groups.release(group)
            except Exception:  # noqa: BLE001 - the lease's TTL frees it
                pass

"""The intake of external gate reports: what is let in, what is dropped and why.

One message from the reports channel, in this order (the first refusal wins):

1. bounds and fields (``gates.reports``)                       -> ``malformed``
2. with trust keys: a valid ``kid``/``sig`` (``gates.trust``)    -> ``unsigned`` | ``bad_signature``
3. addressed to this node by ``node/target``                    -> ``no_node`` (a bare name
   would reach every node with such a target) | ``other_node`` (not ours: counted, not logged)
4. a target this node supervises                                -> ``unknown_target``
5. stamped within ``[now - max_age, now + max_skew]``           -> ``stale`` | ``future``
6. not seen before (same instance + ``request_id``)              -> ``replay``
7. stamped after this guardian started listening                -> ``before_start``
8. within the target's rate (``reports_per_minute``)            -> ``rate_limited``

Why 7: the replay guard lives in memory, so a report accepted before a restart would be
accepted again after it. A report stamped before ``started + max_skew`` (``started`` the wall
time the intake was built, before the subscription) is refused: a gateway's clock may run up
to ``max_skew`` ahead of this node's (further ahead is ``future``), so a report made before
the start can carry a stamp up to ``max_skew`` after it. The cost: for ``max_skew`` seconds
after a start (longer for a gateway whose clock lags) reports are dropped and counted, which
a restart can afford (reports are hints; the guardian's own rounds go on). The simpler of the
two sound fixes: persisting the window would need a file to bound, check and fall back from.

What passes goes into the ledger as a failure with ``source="report"`` and asks the gates
probe for a confirming round of its own (``confirm``). Every outcome is counted; each drop
reason logs one line per episode (an episode ends after ``EPISODE_QUIET_S`` without that
reason, ``gates.outcomes``). Never raises: a bug on a hostile message is counted ``malformed``
and logged once.
Memory is bounded: the names of unknown targets are kept in a small LRU (for status only),
the replay guard and the rate limiter are bounded.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable


from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.gates.ledger import ReportRecord
from vllm_guardian.gates.outcomes import Outcomes
from vllm_guardian.gates.reports import ReportError, parse_message, report_from
from vllm_guardian.gates.status import GatesSummary
from vllm_guardian.gates.trust import KeyRing, RateLimit, ReplayGuard, check

ACCEPTED = "accepted"
OTHER_NODE = "other_node"
DROP_REASONS = (
    "malformed",
    "unsigned",
    "bad_signature",
    "no_node",
    "unknown_target",
    "future",
    "stale",
    "replay",
    "before_start",
    "rate_limited",
)
OUTCOMES = (ACCEPTED, OTHER_NODE) + DROP_REASONS
UNKNOWN_KEPT = 32  # names of unknown targets shown in status (LRU)


class ReportIntake:
    def __init__(
        self,
        node: str,
        trust: TrustConfig,
        keys: KeyRing,
        add: Callable[[str, ReportRecord], None],
        log: logging.Logger,
        confirm: Callable[[str, str], None] | None = None,
        *,
        started: float | None,
    ) -> None:
        """``started``: the wall time this guardian began listening (reports stamped before it,
        plus ``max_skew``, are refused: step 7); None only where no restart can happen (a test of
        the other steps)."""
        self.node, self.trust, self.keys, self.add, self.log = node, trust, keys, add, log
        self.confirm = confirm
        self.floor = None if started is None else started + trust.max_skew
        self.known_targets: frozenset[str] = frozenset()
        self.outcomes = Outcomes(OUTCOMES, "gate report", log)
        self.counts = self.outcomes.counts
        self.unknown: OrderedDict[str, int] = OrderedDict()  # recent unknown target names -> messages
        self._replay = ReplayGuard(trust.max_age + trust.max_skew)
        self._rate = RateLimit(trust.reports_per_minute)
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- status
    def summary(self) -> GatesSummary:
        counts = self.outcomes.snapshot()
        with self._lock:
            unknown = tuple(self.unknown)
        return GatesSummary(
            reports=counts,
            reports_dropped={r: counts[r] for r in DROP_REASONS},
            unknown_targets=unknown,
            trust="signed" if self.keys.enabled else "unsigned",
        )

    # ---------------------------------------------------------------- intake
    def accept(self, raw: bytes | str, mono: float, wall: float) -> str:
        """One message: into the ledger, or counted and (once per episode) logged. Never raises."""
        try:
            return self._accept(raw, mono, wall)
        except Exception as e:  # noqa: BLE001 - a hostile message must never reach the listener as an error
            return self._drop("malformed", wall, f"could not be read ({type(e).__name__}: {str(e)[:120]})")

    def _accept(self, raw: bytes | str, mono: float, wall: float) -> str:
        try:
            msg = parse_message(raw)
            r = report_from(msg)
        except ReportError as e:
            return self._drop("malformed", wall, str(e))
        keys = self.keys.current  # read once: a reload swaps them between messages, never within one
        if keys.enabled:
            refused = check(msg, keys)
            if refused is not None:
                return self._drop(refused[0], wall, f"{r.instance} {r.request_id!r}: {refused[1]}")
        if r.node is None:
            return self._drop("no_node", wall, f"{r.target!r} names no node (use '{self.node}/{r.target}')")
        if r.node != self.node:
            return self.outcomes.count(OTHER_NODE)
        if r.target not in self.known_targets:
            with self._lock:
                self.unknown[r.target] = self.unknown.pop(r.target, 0) + 1
                while len(self.unknown) > UNKNOWN_KEPT:
                    self.unknown.popitem(last=False)
            return self._drop("unknown_target", wall, f"no target {r.target!r} on {self.node}")
        if r.timestamp > wall + self.trust.max_skew:
            return self._drop("future", wall, f"{r.instance} stamped {r.timestamp - wall:.0f}s ahead")
        if wall - r.timestamp > self.trust.max_age:
            return self._drop("stale", wall, f"{r.instance} report is {wall - r.timestamp:.0f}s old")
        if self._replay.seen_before(r.instance, r.request_id, wall):
            return self._drop("replay", wall, f"{r.instance} request {r.request_id!r} again")
        if self.floor is not None and r.timestamp < self.floor:
            return self._drop(
                "before_start",
                wall,
                f"{r.instance} request {r.request_id!r} stamped before this guardian started listening "
                f"(+ max_skew {self.trust.max_skew:g}s): a report accepted before a restart cannot be told from it",
            )
        if not self._rate.take(r.target, mono):
            return self._drop("rate_limited", wall, f"{r.target} over {self.trust.reports_per_minute} reports/min")
        self.add(r.target, ReportRecord(mono, r.failure(), r.request_id))
        self.outcomes.count(ACCEPTED)
        if self.confirm is not None:
            self.confirm(r.target, f"{r.level} report {r.type!r} ({r.request_id})")
        return ACCEPTED

    def _drop(self, reason: str, wall: float, detail: str) -> str:
        return self.outcomes.drop(reason, wall, detail)

    def forget_targets(self) -> None:
        """Rate buckets only for targets still known (called as discovery changes)."""
        self._rate.forget(self.known_targets)

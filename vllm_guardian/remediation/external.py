"""External evidence is a hint, not a verdict: the one rule on what it may make the guardian do.

An ``output_corruption`` incident may rest on evidence the guardian did not see itself:
reports from gateways (``gates.intake``), L4 failures that only other nodes'
fingerprints make (``gates.exchange``) and L4 failures that only autodiscovered local
servers' answers make (``gates.l4_judge``: any process on the node can be one). The detector
says what it rests on (``own_conditions``, ``external``, ``confirmed_by_own_round``; see
``detectors/output_corruption.py``). ``external_hold`` decides, for a remediation the
mode would allow:

- a condition holds on the guardian's own rounds alone -> act (None);
- no trust keys (``gates.trust``): external messages are unauthenticated -> hold: alert only;
- autodiscovered local servers' answers among the evidence (``local_peers``): nothing signs
  them, whatever the keys -> hold: alert only;
- signed external evidence, but no round of the guardian's own has failed since it
  arrived -> hold: alert only until the confirming round (the gates probe runs one at
  once for a report) fails;
- signed and confirmed by a failing own round -> act.

Read by the responder's decide step (``loop/responder.py``) and by the decisions published
on the control channel (``sinks/gate_decisions.py``), so both say the same. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOCAL = "local_peers"  # an L4 failure only autodiscovered servers on this node make
LOCAL_TEXT = "autodiscovered local servers' answers"


def external_hold(signals: Mapping[str, Any], trusted: bool) -> str | None:
    """Why an incident must stay alert-only for now, or None when it may be acted on."""
    if signals.get("own_conditions") or "own_conditions" not in signals:
        return None  # the guardian's own rounds make a condition (or: not a gates incident)
    sources = " and ".join(
        {"report": "gateway reports", "peers": "other nodes' fingerprints", LOCAL: LOCAL_TEXT}.get(s, str(s))
        for s in signals.get("external") or ("external evidence",)
    )
    if LOCAL in (signals.get("external") or ()):
        return f"rests on {sources}; no key authenticates {LOCAL_TEXT}: alert only, never a restart"
    if not trusted:
        return f"rests on {sources}, unauthenticated (no gates.trust key): alert only, never a restart"
    if not signals.get("confirmed_by_own_round"):
        return f"rests on {sources}: alert only until the guardian's own confirming gate round fails"
    return None

"""Signed group requests: the lease holder asks every node to capture its ranks' stacks, then to restart (pure).

A request is ``{v, group, op, incident, from_node, request_id, time, step}`` signed with the trust
keys. Every node reads them from the fleet store; they are outside input. ``decode`` believes only a
signed, fresh request for a group this node hosts members of; ``may_act`` then lets a node act only
on its *own* members, only for a request from the node that holds the group's lease, and only for a
``restart`` whose ``capture`` came first (stacks before any kill). A forged, replayed or stale
request, or one from a node without the lease, is refused with its reason: it never makes a node act.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from vllm_guardian.gates import trust

SCHEMA = 1
CAPTURE = "capture"  # capture the stacks of this node's ranks into the incident
RESTART = "restart"  # restart this node's members (step k of the group plan)
OPS = (CAPTURE, RESTART)
MAX_BYTES = 8 * 1024
MAX_AGE = 60.0
CLOCK_SKEW = 30.0
_ID = re.compile(r"^[A-Za-z0-9_.:/@\[\]-]{1,160}$")


@dataclass(frozen=True)
class GroupRequest:
    group: str
    op: str
    incident: str
    from_node: str
    request_id: str
    time: float
    step: int = 0  # the restart step of the group plan this request is for


@dataclass(frozen=True)
class Refused:
    reason: str
    detail: str


def encode(req: GroupRequest, keys: trust.Keys) -> str:
    body = {"v": SCHEMA, **{k: getattr(req, k) for k in GroupRequest.__dataclass_fields__}}
    return json.dumps(trust.sign(body, keys), sort_keys=True, separators=(",", ":"))


def decode(
    raw: str | bytes, keys: trust.Keys, *, now: float, groups: Collection[str], replay: trust.ReplayGuard
) -> GroupRequest | Refused:
    """The request, or why it is refused. Never raises."""
    if not keys.enabled:
        return Refused("untrusted", "no trust keys: group requests are not believed")
    if len(raw) > MAX_BYTES:
        return Refused("malformed", f"over {MAX_BYTES} bytes")
    try:
        doc: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return Refused("malformed", "not JSON")
    if not isinstance(doc, dict):
        return Refused("malformed", "not a JSON object")
    bad = trust.check(doc, keys)
    if bad is not None:
        return Refused(*bad)
    fields = {k: doc.get(k) for k in ("group", "op", "incident", "from_node", "request_id")}
    if doc.get("v") != SCHEMA or any(not isinstance(v, str) or not _ID.match(v) for v in fields.values()):
        return Refused("malformed", "a field is missing or not a name")
    when, step = doc.get("time"), doc.get("step", 0)
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        return Refused("malformed", "time is not a finite number")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= 16:
        return Refused("malformed", "step is not in 0..16")
    if fields["op"] not in OPS:
        return Refused("malformed", f"op is not one of {', '.join(OPS)}")
    if when > now + CLOCK_SKEW or now - when > MAX_AGE:
        return Refused("stale", f"time {when:.0f} is outside the last {MAX_AGE:.0f} s")
    if fields["group"] not in groups:
        return Refused("not_ours", "this node hosts no member of that group")
    if replay.seen_before(str(fields["from_node"]), str(fields["request_id"]), now):
        return Refused("replayed", f"request {fields['request_id']} was seen before")
    return GroupRequest(time=float(when), step=step, **fields)  # type: ignore[arg-type]


def may_act(req: GroupRequest, *, lease_holder: str | None, captured: Collection[str]) -> Refused | None:
    """None when this node may carry out ``req`` on its own members; else why not."""
    if lease_holder is None or req.from_node != lease_holder:
        return Refused("no_lease", f"{req.from_node} does not hold the lease of {req.group} ({lease_holder or 'free'})")
    if req.op == RESTART and req.incident not in captured:
        return Refused("no_capture", f"stacks of incident {req.incident} not captured here yet")
    return None

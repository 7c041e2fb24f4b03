"""The fleet view (``guardian fleet``): every node × target, read from the fleet store only.

``read_fleet(client, stream=…, now_wall=…)`` gathers, through the store's own readers:
- the nodes and their targets, phases and open incidents from the heartbeats
  (``sinks/fleet.fleet_status``: ``guardian:node:<node>``, SCAN);
- the restarts of the last ``window_s`` seconds from the alerts stream (``XRANGE`` from the window's
  first millisecond, in pages, at most ``max_events`` entries: a cut is said, never hidden): the
  incidents whose events carry a ``stop`` action in the window (the restart signalling the tree);
- the groups from their records (``sinks/group_record``: one hash per group, one field per node that
  published) and who holds each group's lease (``sinks/group_lease.GroupLease.holder``).
Then ``FleetView.models`` joins the targets per model. Everything here is display: the heartbeats,
events and records are whatever the store's writers wrote (any client of the fleet Redis), bounded
and shown, never acted on. ``render_text`` draws it; ``surface/fleet_html.py`` draws the page.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from vllm_guardian.sinks.fleet import _age, _s, fleet_status, parse_entry
from vllm_guardian.sinks.group_lease import GroupLease
from vllm_guardian.sinks.group_record import GROUP_PREFIX, MAX_NODES

WINDOW_S = 24 * 3600.0
MAX_EVENTS = 200_000  # alert events read for the restart counts
PAGE = 1000
MAX_GROUPS = 1000
MAX_TEXT = 128  # characters of one name (node, target, model, kind, phase) shown
# A restart sequence records "stop" when it signals the target's tree (after the restart ledger counted
# it; a drain alone never stops): one restart per incident (a failed one is not retried for it).
RESTART_ACTION = "stop"


def _name(value: Any) -> str:
    return _s("-" if value is None else value)[:MAX_TEXT]


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    return value if isinstance(value, list) else []


def _dict(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class TargetRow:
    node: str
    name: str
    phase: str
    model: str
    incidents: tuple[str, ...]  # the kinds of its open incidents
    restarts: int  # in the window


@dataclass(frozen=True)
class NodeRow:
    node: str
    version: str
    time: float | None  # the heartbeat's own wall time
    ttl_s: float | None
    spooled: int | None
    targets: tuple[TargetRow, ...]
    error: str | None = None


@dataclass(frozen=True)
class GroupRow:
    group: str
    nodes: tuple[str, ...]  # nodes with a record of their members (not verified here: display)
    lease: str | None  # the node named in the group lease


@dataclass(frozen=True)
class ModelRow:
    model: str
    targets: int
    serving: int
    with_incident: int
    kinds: tuple[str, ...]
    restarts: int


@dataclass(frozen=True)
class FleetView:
    time: float
    window_s: float
    nodes: tuple[NodeRow, ...]
    groups: tuple[GroupRow, ...]
    events_read: int
    events_cut: bool  # more events than max_events in the window: restart counts are a floor

    @property
    def targets(self) -> list[TargetRow]:
        return [t for n in self.nodes for t in n.targets]

    @property
    def models(self) -> tuple[ModelRow, ...]:
        by: dict[str, list[TargetRow]] = defaultdict(list)
        for t in self.targets:
            by[t.model].append(t)
        return tuple(
            ModelRow(
                model,
                len(rows),
                sum(1 for t in rows if t.phase == "serving"),
                sum(1 for t in rows if t.incidents),
                tuple(sorted({k for t in rows for k in t.incidents})),
                sum(t.restarts for t in rows),
            )
            for model, rows in sorted(by.items())
        )

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["models"] = [asdict(m) for m in self.models]
        return doc


def _wall(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def restart_counts(
    client: Any, stream: str, since_wall: float, *, max_events: int = MAX_EVENTS
) -> tuple[dict[tuple[str, str], int], int, bool]:
    """(node, target) -> restarts since ``since_wall``, the events read, whether the read was cut."""
    seen: set[str] = set()
    counts: dict[tuple[str, str], int] = defaultdict(int)
    start, read = f"{max(0, int(since_wall * 1000))}-0", 0
    while True:
        want = min(PAGE, max_events - read)
        page = client.xrange(stream, min=start, max="+", count=max(1, want))
        if not page:
            return counts, read, False
        if want == 0:  # the cap is reached and there is more
            return counts, read, True
        for entry_id, fields in page:
            _, event = parse_entry(entry_id, fields)
            target = _dict(event, "target")
            for action in _list(event, "actions"):
                if not isinstance(action, dict) or action.get("name") != RESTART_ACTION:
                    continue
                at = _wall(action.get("at"))
                key = _name(event.get("incident_id"))
                if at is None or at < since_wall or key in seen:
                    continue
                seen.add(key)
                counts[(_name(event.get("node")), _name(target.get("name")))] += 1
        read += len(page)
        start = "(" + _s(page[-1][0])
        if len(page) < want:
            return counts, read, False


def read_groups(client: Any, *, max_groups: int = MAX_GROUPS) -> tuple[GroupRow, ...]:
    """Every group with a record in the store: its publishing nodes and its lease holder."""
    lease = GroupLease(client, node="")
    rows = []
    for n, key in enumerate(sorted({_s(k) for k in client.scan_iter(match=f"{GROUP_PREFIX}*", count=100)})):
        if n >= max_groups:
            break
        group = key[len(GROUP_PREFIX) :]
        nodes = [_name(f) for i, (f, _v) in enumerate(client.hscan_iter(key, count=100)) if i < MAX_NODES]
        rows.append(GroupRow(_name(group), tuple(sorted(nodes)), lease.holder(group)))
    return tuple(rows)


def _node_row(doc: Mapping[str, Any], restarts: Mapping[tuple[str, str], int]) -> NodeRow:
    node = _name(doc.get("node"))
    incidents = _list(doc, "incidents")
    kind_of = {_s(i.get("id")): _name(i.get("kind")) for i in incidents if isinstance(i, dict)}
    targets = []
    for t in _list(doc, "targets"):
        if not isinstance(t, dict):
            continue
        name = _name(t.get("name"))
        ids = _list(t, "incidents")
        kinds = tuple(kind_of.get(_s(i), _name(i)) for i in ids)  # the kinds (an older writer: the ids)
        targets.append(TargetRow(node, name, _name(t.get("phase")), _name(t.get("model")), kinds, restarts[node, name]))
    spooled = _dict(doc, "alerts").get("spooled")
    when = doc.get("time")
    return NodeRow(
        node,
        _name(doc.get("version")),
        float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None,
        doc.get("ttl_s"),
        spooled if isinstance(spooled, int) and not isinstance(spooled, bool) else None,
        tuple(targets),
        _name(doc["error"]) if doc.get("error") else None,
    )


def read_fleet(
    client: Any, *, stream: str, now_wall: float, window_s: float = WINDOW_S, max_events: int = MAX_EVENTS
) -> FleetView:
    """The fleet as the store holds it now (Redis errors propagate: the caller says which Redis)."""
    counts, read, cut = restart_counts(client, stream, now_wall - window_s, max_events=max_events)
    restarts: defaultdict[tuple[str, str], int] = defaultdict(int, counts)
    nodes = tuple(_node_row(doc, restarts) for doc in fleet_status(client))
    return FleetView(now_wall, window_s, nodes, read_groups(client), read, cut)


def render_text(view: FleetView) -> str:
    """The fleet as text: a summary line, nodes × targets, models, groups."""
    targets = view.targets
    lines = [
        f"{len(view.nodes)} nodes · {len(targets)} targets ({sum(t.phase == 'serving' for t in targets)} serving) · "
        f"{sum(len(t.incidents) for t in targets)} open incidents · "
        f"{sum(t.restarts for t in targets)}{'+' if view.events_cut else ''} restarts in {view.window_s / 3600:g} h",
    ]
    if not view.nodes:
        return lines[0] + "\nno guardian heartbeats in the fleet store"
    lines += ["", f"{'NODE':<20} {'TARGET':<16} {'MODEL':<24} {'PHASE':<10} {'RESTARTS':>8} {'SEEN':>5}  INCIDENTS"]
    for n in view.nodes:
        seen = _age(n.time, view.time)
        if n.error:
            lines.append(f"{n.node[:20]:<20} {n.error}")
        for t in n.targets or (TargetRow(n.node, "-", "-", "-", (), 0),):
            lines.append(
                f"{n.node[:20]:<20} {t.name[:16]:<16} {t.model[:24]:<24} {t.phase[:10]:<10} {t.restarts:>8} "
                f"{seen:>5}  {', '.join(t.incidents) or '-'}"
            )
    lines += ["", f"{'MODEL':<32} {'TARGETS':>7} {'SERVING':>7} {'INCIDENT':>8} {'RESTARTS':>8}  KINDS"]
    for m in view.models:
        lines.append(
            f"{m.model[:32]:<32} {m.targets:>7} {m.serving:>7} {m.with_incident:>8} {m.restarts:>8}  "
            f"{', '.join(m.kinds) or '-'}"
        )
    if view.groups:
        lines += ["", f"{'GROUP':<32} {'LEASE':<20} NODES WITH A RECORD"]
        lines += [f"{g.group[:32]:<32} {(g.lease or '-')[:20]:<20} {', '.join(g.nodes)}" for g in view.groups]
    if view.events_cut:
        lines.append(f"\nrestart counts are a floor: only the first {view.events_read} events of the window were read")
    return "\n".join(lines)


def phases(targets: Sequence[TargetRow]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for t in targets:
        out[t.phase] += 1
    return dict(sorted(out.items()))

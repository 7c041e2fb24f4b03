"""The daemon's group stage: which targets belong to a group, their record published, the others' read.

Reads each target's API-server (or headless) process argv (``groups.identity.identify``), the
tracker's state of each target and the open incidents; writes, every ``groups.interval``, this
node's signed record per group to the fleet store (``sinks/group_record.GroupBoard``) and reads
every node's back. Applies what ``groups/stage.py`` and ``groups/scope.py`` decide: a headless
rank's target URL (``rewrite``, on every discovery pass and when a record changes it), the findings
each node raises (``scope``), the ``groups`` status section. Redis errors are logged once per
outage, counted, and the loop goes on; without trust keys nothing is published or believed
(``status`` says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from vllm_guardian.config.schema_groups import GroupsConfig
from vllm_guardian.errors import GuardianError
from vllm_guardian.gates.trust import KeyRing
from vllm_guardian.groups import record as rec
from vllm_guardian.groups.identity import GroupIdentity, identify
from vllm_guardian.groups.plan import RESTART, plan
from vllm_guardian.groups.scope import scope, spread
from vllm_guardian.loop.group_requests import GroupExchange
from vllm_guardian.groups.stage import GroupRankStatus, GroupStatus, leader_url, members
from vllm_guardian.model import Finding, Incident, Kind, ProcKey, Target
from vllm_guardian.sinks.group_record import GroupBoard
from vllm_guardian.sinks.redis_client import redis_errors
from vllm_guardian.state.tracker import TrackedTarget


class GroupStage:
    """The groups of this node's targets, their records and the views read back (``board``: the fleet store)."""

    def __init__(
        self,
        cfg: GroupsConfig,
        node: str,
        client: Any | None,
        keys: KeyRing,
        wall: Callable[[], float],
        log: logging.Logger,
        exchange: GroupExchange | None = None,
    ) -> None:
        self.cfg, self.node, self.client, self.keys, self.wall, self.log = cfg, node, client, keys, wall, log
        self.exchange = exchange  # capture requests and stacks answers (loop/group_requests.py)
        self.delegate: Callable[[str, str], None] = lambda target, group: None  # the group gate's (assemble)
        self.restart: Callable[[str, str], None] = lambda target, why: None  # a restart sequence (assemble)
        self._targets: Mapping[str, TrackedTarget] = {}
        self._order: dict[str, tuple[float, int | None]] = {}  # target -> (asked at, the leader's pid then)
        self._ids: dict[ProcKey, GroupIdentity | None] = {}
        self.views: dict[str, rec.GroupView] = {}
        self._next = float("-inf")
        self._failing = False
        self.failures = 0
        self.published = 0

    def identity(self, target: Target) -> GroupIdentity | None:
        """The group of the target's root process (read once per process)."""
        if target.key not in self._ids:
            root = target.api_server
            ident = identify(root.cmdline) if root is not None else None
            self._ids[target.key] = ident if ident is not None and ident.group else None
            if ident is not None and ident.problems:
                self.log.warning("target %s: group flags not understood: %s", target.name, "; ".join(ident.problems))
        return self._ids[target.key]

    def rewrite(self, target: Target) -> Target:
        """A headless rank's target reached at its leader (None until a believed record names it)."""
        ident = self.identity(target)
        if ident is None or ident.leader or not spread(ident):
            return target
        return replace(target, api_url=leader_url(ident, self.views.get(ident.group)))

    def group_of(self, targets: Mapping[str, TrackedTarget], name: str) -> str | None:
        """The group of target ``name`` when it spreads over nodes (its restart needs the group lease)."""
        tr = targets.get(name)
        ident = self._ids.get(tr.target.key) if tr is not None else None
        return ident.group if ident is not None and spread(ident) else None

    def scope(self, target: Target, findings: Mapping[Kind, Finding | None]) -> dict[Kind, Finding | None]:
        return scope(self.identity(target), self.node, findings)

    def tick(self, now: float, targets: Mapping[str, TrackedTarget], incidents: Iterable[Incident]) -> None:
        """Publish this node's records and read every node's, every ``interval`` (``now``: monotonic)."""
        if not self.cfg.enabled or self.client is None or now < self._next:
            return
        self._next = now + self.cfg.interval
        self._targets = targets
        self._ids = {t.target.key: self._ids.get(t.target.key) for t in targets.values() if t.target.key in self._ids}
        incidents = tuple(incidents)
        records = self._records(targets, incidents)
        if not self.keys.enabled:
            return  # status says: no trust keys, no group record
        board = GroupBoard(self.client, self.keys.current, ttl=4 * self.cfg.max_age)
        try:
            for r in records.values():
                board.publish(r)
                self.published += 1
            wall = self.wall()
            groups = set(records) | {i.group for i in self._ids.values() if i is not None}
            self.views = {g: board.read(g, now=wall, max_age=self.cfg.max_age) for g in sorted(groups)}
            if self.exchange is not None:
                hosted = {g: tuple((m.rank, m.pid) for m in r.members) for g, r in records.items()}
                self.exchange.step(wall, hosted, incidents)
        except redis_errors() as e:  # redis down, a timeout: logged once per outage, counted, the loop goes on
            self.failures += 1
            if not self._failing:
                self.log.warning("groups: the fleet store could not be reached (%s): records not exchanged", e)
            self._failing = True
            return
        if self._failing:
            self.log.info("groups: the fleet store answers again")
        self._failing = False
        for tr in targets.values():  # a leader named (or gone) since discovery last ran
            new = self.rewrite(tr.target)
            if new.api_url != tr.target.api_url:
                self.log.info("target %s: its group's leader is at %s", tr.name, new.api_url or "(unknown)")
                tr.target = new

    def on_restart(self, group: str, incident: str) -> None:
        """The lease holder asked (signed, believed) for the plan's leader step: restart this node's leader."""
        for name, tr in self._targets.items():
            ident = self._ids.get(tr.target.key)
            if ident is not None and ident.group == group and ident.leader:
                self.delegate(name, group)
                self.log.warning(
                    "group %s: restarting %s, asked by the group's lease holder (%s)", group, name, incident
                )
                try:
                    self.restart(name, f"group {group}: {incident}")
                except GuardianError as e:  # the target went meanwhile: said, the loop goes on
                    self.log.warning("group %s: %s not restarted: %s", group, name, e)

    def before_start(self, name: str, incident: str | None, now: float) -> str | None:
        """Why a headless member's restart must wait before starting (None: go): the group plan restarts
        the leader (on its node, by a signed request) between stopping and starting the headless ranks."""
        tr = self._targets.get(name)
        ident = self._ids.get(tr.target.key) if tr is not None else None
        view = self.views.get(ident.group) if ident is not None else None
        if ident is None or ident.leader or not spread(ident) or view is None or incident is None:
            return None
        steps = [s for s in plan(ident.kind, view.ranks) if s.action == RESTART and s.node != self.node]
        if not steps or self.exchange is None:
            return None
        lead = view.leader()
        lead_pid = lead[1].pid if lead is not None else None
        if name not in self._order:
            self._order[name] = (now, lead_pid)
            self.exchange.request_restart(ident.group, incident, self.wall())
            return f"group plan: the leader on {steps[0].node} restarts first (asked, signed)"
        asked, before = self._order[name]
        if lead is None or lead_pid != before or lead[1].health == "dead":
            del self._order[name]
            return None  # the old leader is gone: this node's ranks connect to the new one when it listens
        if now - asked > self.cfg.order_timeout:
            del self._order[name]
            waited = now - asked
            self.log.warning("group %s: the leader did not restart within %.0fs: starting anyway", ident.group, waited)
            return None
        return f"group plan: waiting for the old leader on {steps[0].node} to go"

    def _records(
        self, targets: Mapping[str, TrackedTarget], incidents: tuple[Incident, ...]
    ) -> dict[str, rec.NodeRecord]:
        out: dict[str, rec.NodeRecord] = {}
        wall = self.wall()
        for tr in targets.values():
            ident = self.identity(tr.target)
            if ident is None:
                continue  # a member whose process is gone is still published (health dead) until forgotten
            mine = members(tr.target, ident, tr, incidents)
            prev = out.get(ident.group)
            port = tr.target.port if ident.leader else None
            if prev is not None:
                mine = prev.members + tuple(m for m in mine if m.rank not in {p.rank for p in prev.members})
                port = prev.api_port or port
            out[ident.group] = rec.NodeRecord(
                group=ident.group,
                kind=ident.kind,
                node=self.node,
                time=wall,
                size=ident.size,
                leader_address=ident.leader_address,
                members=mine,
                api_port=port,
            )
        return out

    def status(self, targets: Mapping[str, TrackedTarget]) -> tuple[GroupStatus, ...]:
        local: dict[str, list[tuple[str, GroupIdentity]]] = {}
        for name, tr in targets.items():
            ident = self._ids.get(tr.target.key)
            if ident is not None:
                local.setdefault(ident.group, []).append((name, ident))
        out = []
        for group, held in sorted(local.items()):
            view = self.views.get(group)
            lead = view.leader() if view is not None else None
            ranks = (
                ()
                if view is None
                else tuple(
                    GroupRankStatus(r, n, m.pid, m.health, m.leader, m.incident) for r, (n, m) in view.ranks.items()
                )
            )
            problems = tuple(p for _, i in held for p in i.problems)
            if not self.keys.enabled:
                problems += ("no trust keys (gates.trust): no group record is published or believed",)
            out.append(
                GroupStatus(
                    group=group,
                    kind=held[0][1].kind,
                    size=held[0][1].size,
                    targets=tuple(n for n, _ in held),
                    local_ranks=tuple(sorted(r for _, i in held for r in i.ranks)),
                    leader_node=lead[0] if lead is not None else None,
                    ranks=ranks,
                    conflicts=view.conflicts if view is not None else (),
                    rejected=tuple(f"{r.node}: {r.reason}" for r in view.rejected) if view is not None else (),
                    problems=problems,
                )
            )
        return tuple(out)

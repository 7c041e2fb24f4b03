"""Evidence from every rank: signed group ``capture`` requests, each node's py-spy stacks, linked on the incident.

Reads and writes, in the fleet Redis, ``guardian:group-req:<group>`` (request id -> a signed
``groups.request`` request) and ``guardian:group-stacks:<group>`` (``<incident>|<node>`` -> a signed
``groups.stacks`` answer), both hashes with a TTL, at most ``MAX_FIELDS`` fields read per tick.
Decides, each time the group stage runs:

- a group incident open on this node (its signals name a ``group``) is asked about once: this node
  takes the group lease (the same one a restart needs) and, when it has it, sends a signed
  ``capture`` request; when another node holds it, that node is the actor and this one only answers;
- a request is acted on only when ``request.decode`` believes it (signed, fresh, once, for a group
  this node hosts) and ``request.may_act`` allows it (its sender holds the lease now): this node
  runs ``py-spy dump --nonblocking`` on each of its own ranks' engine processes (off the loop, one
  at a time), writes the text under ``<state_dir>/group-stacks/<incident>/`` and answers;
- the node that asked links every believed answer on its incident (an ``Action`` ``group_stacks``
  naming node, rank and file), once per node; when the incident resolves it gives the group lease
  back, unless one of its restart sequences holds it (``acting``) or another open incident asked.

A believed ``restart`` request from the lease holder (after this node captured that incident's
stacks) hands this node's members of the group to ``on_restart`` (the group stage restarts them
through the ordinary restart sequence), once per incident. Refusals are counted by reason.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.evidence import default_locate
from vllm_guardian.gates import trust
from vllm_guardian.gates.trust import KeyRing
from vllm_guardian.groups import request as req
from vllm_guardian.groups import stacks as st
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.model import Action, Incident
from vllm_guardian.sinks.group_lease import GroupLease

REQ_PREFIX = "guardian:group-req:"
STACKS_PREFIX = "guardian:group-stacks:"
MAX_FIELDS = 64
KEY_TTL_MS = 300_000
PYSPY_TIMEOUT = 15.0

Ranks = Sequence[tuple[int, int]]  # (rank, pid of its engine process) this node hosts in a group


def _s(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


class GroupExchange:
    def __init__(
        self,
        node: str,
        client: Any,
        keys: KeyRing,
        lease: GroupLease,
        lease_ttl: float,
        commands: CommandRunner,
        pyspy_path: str,
        out_dir: str,
        record_action: Callable[[str, Action], None],
        log: logging.Logger,
        on_restart: Callable[[str, str], None] = lambda group, incident: None,
        acting: Callable[[str], bool] = lambda group: False,
    ) -> None:
        self.node, self.client, self.keys, self.lease, self.lease_ttl = node, client, keys, lease, lease_ttl
        self.commands, self.pyspy_path, self.out_dir = commands, pyspy_path, out_dir
        self.record_action, self.log, self.on_restart = record_action, log, on_restart
        self.acting = acting  # a restart sequence of this node holds the group's lease (the group gate)
        self.restarted: set[str] = set()  # incidents whose restart request this node carried out
        self.replay = trust.ReplayGuard(req.MAX_AGE + req.CLOCK_SKEW)
        self.asked: dict[str, str | None] = {}  # incident -> its group, when this node is its actor
        self.captured: set[str] = set()  # incidents whose stacks this node captured (or is capturing)
        self.linked: set[tuple[str, str]] = set()  # (incident, node) answers linked on the incident
        self.refused: Counter[str] = Counter()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-stacks")

    def step(self, wall: float, hosted: Mapping[str, Ranks], incidents: Iterable[Incident]) -> None:
        """One exchange: ask about new group incidents, serve believed requests, link answers."""
        open_here = [i for i in incidents if isinstance(i.signals.get("group"), str)]
        for inc in open_here:
            if inc.id not in self.asked:
                self.asked[inc.id] = self._ask(inc, str(inc.signals["group"]), wall)
        for group, ranks in hosted.items():
            self._serve(group, ranks, wall, set(hosted))
        for inc in open_here:
            actor_of = self.asked.get(inc.id)
            if actor_of is not None:
                self._link(inc.id, actor_of, wall)
        still = {i.id for i in open_here}
        for gone in [i for i in self.asked if i not in still]:  # resolved: the lease it took is given back
            held = self.asked.pop(gone)
            if held is not None and not self.acting(held) and held not in self.asked.values():
                self.lease.release(held)

    def _ask(self, inc: Incident, group: str, wall: float) -> str | None:
        if not self.lease.acquire(group, self.lease_ttl):
            self.log.info("group %s: incident %s: another node holds the group lease and acts", group, inc.id)
            return None
        r = req.GroupRequest(group, req.CAPTURE, inc.id, self.node, f"{inc.id}:capture", wall)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(REQ_PREFIX + group, r.request_id, req.encode(r, self.keys.current))
        pipe.pexpire(REQ_PREFIX + group, KEY_TTL_MS)
        pipe.execute()
        self.log.info("group %s: incident %s: every node asked for its ranks' stacks", group, inc.id)
        return group

    def request_restart(self, group: str, incident: str, wall: float) -> None:
        """As the lease holder: ask the other nodes (signed) to restart their members of ``group`` (plan step 1)."""
        r = req.GroupRequest(group, req.RESTART, incident, self.node, f"{incident}:restart", wall, step=1)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(REQ_PREFIX + group, r.request_id, req.encode(r, self.keys.current))
        pipe.pexpire(REQ_PREFIX + group, KEY_TTL_MS)
        pipe.execute()

    def _serve(self, group: str, ranks: Ranks, wall: float, groups: set[str]) -> None:
        for n, (_field, raw) in enumerate(self.client.hscan_iter(REQ_PREFIX + group, count=MAX_FIELDS)):
            if n >= MAX_FIELDS:
                break
            got = req.decode(raw, self.keys.current, now=wall, groups=groups, replay=self.replay)
            if isinstance(got, req.Refused):
                if got.reason not in ("replayed", "stale"):  # the same request is read again each time
                    self.refused[got.reason] += 1
                continue
            no = req.may_act(got, lease_holder=self.lease.holder(group), captured=self.captured)
            if got.op == req.RESTART:
                if no is not None:
                    self.refused[no.reason] += 1
                if no is not None or got.incident in self.restarted or got.from_node == self.node:
                    continue  # refused, carried out already, or this node's own (it acts on its own members)
                self.restarted.add(got.incident)
                self.log.warning(
                    "group %s: %s asks (signed, lease holder) to restart this node's members", group, got.from_node
                )
                self.on_restart(group, got.incident)
                continue
            if no is not None or got.incident in self.captured:
                self.refused[no.reason if no is not None else "captured"] += 1
                continue
            self.captured.add(got.incident)
            self._pool.submit(self._capture, got, tuple(ranks))

    def _capture(self, r: req.GroupRequest, ranks: Ranks) -> None:
        where = os.path.join(self.out_dir, r.incident.replace("/", "_"))
        files: list[tuple[int, str]] = []
        failed: list[str] = []
        exe = default_locate(self.pyspy_path)
        try:
            os.makedirs(where, mode=0o700, exist_ok=True)
            for rank, pid in ranks:
                if exe is None:
                    failed.append(f"rank {rank}: {pyspy.MISSING_REASON}")
                    continue
                argv = pyspy.dump_argv(exe, pid, as_json=False, nonblocking=True)
                res = self.commands.run(argv, PYSPY_TIMEOUT)
                if not res.ok:
                    why = pyspy.error_message(res.error_text) or f"exit {res.returncode}"
                    failed.append(f"rank {rank}: {why}"[:160].encode("ascii", "replace").decode())
                    continue
                path = os.path.join(where, f"{self.node}-rank{rank}-pid{pid}.txt")
                with open(path, "wb") as fh:
                    fh.write(res.stdout)
                files.append((rank, path))
            answer = st.Stacks(r.group, r.incident, self.node, r.time, tuple(files), tuple(failed))
            key = STACKS_PREFIX + r.group
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, f"{r.incident}|{self.node}", st.encode(answer, self.keys.current))
            pipe.pexpire(key, KEY_TTL_MS)
            pipe.execute()
            done = [x for x, _ in files]
            self.log.info("group %s: incident %s: stacks of ranks %s captured", r.group, r.incident, done)
        except Exception as e:  # noqa: BLE001 - redis or the disk: said once per request, the loop goes on
            self.log.warning("group %s: incident %s: stacks not captured or not answered: %s", r.group, r.incident, e)

    def _link(self, incident: str, group: str, wall: float) -> None:
        for n, (field, raw) in enumerate(self.client.hscan_iter(STACKS_PREFIX + group, count=MAX_FIELDS)):
            if n >= MAX_FIELDS:
                break
            inc, _, node = _s(field).partition("|")
            if inc != incident or (incident, node) in self.linked:
                continue
            got = st.decode(raw, self.keys.current, group=group, node=node[:128], now=wall)
            if isinstance(got, st.Refused) or got.incident != incident:
                self.refused[got.reason if isinstance(got, st.Refused) else "misfiled"] += 1
                continue
            self.linked.add((incident, node))
            self.record_action(incident, Action("group_stacks", "ok" if got.files else "failed", wall, got.line()))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

"""Orphaned vLLM processes on this node: found every ``groups.orphan_interval``, reported, and stopped
when proven ours and ``groups.stop_orphans`` is on (never in dry-run).

Reads /proc (``seams.proc``): every process whose argv[0] starts with ``VLLM::``, then its
ancestors up to init (each one's argv, to tell a live vLLM API server) — off the loop, in a scan thread
of its own (a wedged /proc read never blocks a tick; the next scan starts only once it returns; the
tick after it returns judges its table); remembers the pid and start
time of every process once in a supervised tree (the tracker's targets, each tick it runs; at most
``MAX_REMEMBERED``). ``groups.orphans.find_orphans`` decides which are orphans and which are
provable. Acts: a provable orphan is sent SIGKILL through the process-control seam by its
``ProcKey`` (pid and start time: a reused pid is never signalled); a title-only one is reported,
never signalled. Every orphan seen is logged once; the count is in status (``orphans``) and the
``guardian_orphans`` metric. A process that vanishes mid-read is skipped.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections import OrderedDict
from collections.abc import Mapping

from vllm_guardian.discovery.argv import is_api_server
from vllm_guardian.errors import GuardianError
from vllm_guardian.groups.orphans import TITLE, Orphan, OrphanRow, OrphansStatus, Proc, find_orphans
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcKey
from vllm_guardian.state.tracker import TrackedTarget

MAX_REMEMBERED = 65_536
MAX_DEPTH = 64  # ancestors read per candidate


class OrphanWatch:
    def __init__(
        self,
        proc: ProcFS,
        signal_key,
        *,
        interval: float,
        min_rss: int,
        stop: bool,
        page_size: int,
        log: logging.Logger,
    ) -> None:
        self.proc, self.signal_key, self.interval, self.min_rss = proc, signal_key, interval, min_rss
        self.stop, self.page_size, self.log = stop, page_size, log
        self.supervised: OrderedDict[int, int] = OrderedDict()  # pid -> start time, once in a supervised tree
        self.found: tuple[OrphanRow, ...] = ()
        self.stopped_total = 0
        self._said: set[tuple[int, int]] = set()
        self._next = float("-inf")
        self._scan: threading.Thread | None = None
        self._table: dict[int, Proc] | None = None  # the last scan's, not judged yet

    def status_section(self) -> OrphansStatus:
        return OrphansStatus(self.found, self.stopped_total, self.stop)

    def remember(self, targets: Mapping[str, TrackedTarget]) -> None:
        for tr in targets.values():
            for p in tr.target.processes:
                self.supervised[p.pid] = p.key.starttime
                self.supervised.move_to_end(p.pid)
        while len(self.supervised) > MAX_REMEMBERED:
            self.supervised.popitem(last=False)

    def step(self, now: float, targets: Mapping[str, TrackedTarget]) -> None:
        self.remember(targets)
        table, self._table = self._table, None
        if table is not None:
            self._judge(table)
        if now < self._next or (self._scan is not None and self._scan.is_alive()):
            return  # not yet, or the last scan has not returned (a wedged /proc read): never a second
        self._next = now + self.interval
        self._scan = threading.Thread(target=self._run_scan, name="guardian-orphans", daemon=True)
        self._scan.start()

    def _run_scan(self) -> None:
        try:
            self._table = self._read()
        except Exception as e:  # noqa: BLE001 - a scan that fails finds nothing this time
            self.log.debug("orphan scan failed: %s: %s", type(e).__name__, e)

    def _judge(self, table: dict[int, Proc]) -> None:
        """On the loop: judge a scan's table, stop what is provably ours, report the rest."""
        found = find_orphans(list(table.values()), supervised=self.supervised, min_rss=self.min_rss)
        out = []
        for o in found:
            key = (o.pid, table[o.pid].start)
            stopped = self.stop and o.provable and self._stop(o, table[o.pid].start)
            if key not in self._said:
                self._said.add(key)
                self.log.warning(
                    "orphan %s pid %d (%d MiB RSS) has no live API server: %s",
                    o.title,
                    o.pid,
                    o.rss >> 20,
                    "stopped" if stopped else ("was supervised here" if o.provable else "reported only (title alone)"),
                )
            out.append(OrphanRow(o.pid, o.title, o.rss, o.why, o.provable, stopped))
        self.found = tuple(out)

    def _stop(self, o: Orphan, start: int) -> bool:
        ok = bool(self.signal_key(ProcKey(o.pid, start), signal.SIGKILL))
        if ok:
            self.stopped_total += 1
        return ok

    def _read(self) -> dict[int, Proc]:
        table: dict[int, Proc] = {}
        try:
            pids = self.proc.pids()
        except (OSError, GuardianError):
            return table
        for pid in pids:
            try:
                argv = self.proc.cmdline(pid)
            except (OSError, GuardianError):
                continue
            if argv and argv[0].startswith(TITLE):
                self._add(pid, argv, table)
        return table

    def _add(self, pid: int, argv: tuple[str, ...], table: dict[int, Proc]) -> None:
        for _ in range(MAX_DEPTH):
            if pid in table or pid <= 1:
                return
            try:
                st = self.proc.stat(pid)
                argv = argv or self.proc.cmdline(pid)
            except (OSError, GuardianError):
                return
            title = argv[0] if argv else st.comm
            rss = st.rss_pages * self.page_size
            table[pid] = Proc(pid, st.ppid, st.starttime, title, rss, api_server=is_api_server(argv))
            pid, argv = st.ppid, ()

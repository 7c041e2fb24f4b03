"""One pass over /proc for discovery, and what the next pass may take from it unread.

Reads, through ``ProcFS``, every process's stat and cmdline (a title that settled, or a stat read
less than ``STAT_REFRESH_S`` ago, is taken from the ``DiscoveryCache``), lazily the listening
sockets of a port (``/proc/net/tcp``) and the fd tables that own them (the last pass's owners are
checked first: one fd table read instead of every process's). Decides nothing about targets: the
scan (``discovery/scan.py``) and the socket rule (``discovery/sockets.py``) ask it questions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from vllm_guardian import proctree
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcKey


@dataclass(frozen=True)
class Proc:
    key: ProcKey
    ppid: int
    state: str
    cmdline: tuple[str, ...]


CMDLINE_SETTLE_S = 30.0  # vLLM retitles its children (VLLM::EngineCore …) right after they start
# a process seen by the last pass is taken as it was (its stat not read again) for this long, unless
# it is watched or its parent is gone; every other pass reads one stat per *new* pid, not per pid
STAT_REFRESH_S = 30.0


@dataclass
class DiscoveryCache:
    """What one pass learnt that the next can check cheaply: which processes own which
    listening socket inodes (finding them means reading every process's fd table)."""

    owners: dict[int, frozenset[ProcKey]] = field(default_factory=dict)
    # port -> inodes of the sockets found listening on it: while their owners live and hold
    # them, the next pass reads one process's fds, not /proc/net/tcp (whose read walks the
    # kernel's whole connection table: ~1.6 ms per file on a small host, more on a big one)
    ports: dict[int, frozenset[int]] = field(default_factory=dict)
    # cmdline per process identity and when it was first seen; a title older than
    # CMDLINE_SETTLE_S is not read again (the full scan then costs one stat read per pid)
    cmdlines: dict[ProcKey, tuple[tuple[str, ...], float]] = field(default_factory=dict)
    now: float = 0.0  # monotonic time of the pass, set by the caller
    # processes whose cmdline is never read again (a read of theirs blocked a pass): a title
    # read before is still used, else they are skipped like a process whose cmdline is unreadable
    skip: frozenset[ProcKey] = frozenset()
    # this pass's identities by pid, filled as it reads (who a pass stuck in a read blocked on)
    keys: dict[int, ProcKey] = field(default_factory=dict)
    # pid -> (identity, ppid, state, when its stat was read): a pid listed again within
    # STAT_REFRESH_S is the same process (a pid is reused only once its holder is gone and the
    # kernel's pids wrapped around) with the same parent (re-read when that parent is gone)
    stats: dict[int, tuple[ProcKey, int, str, float]] = field(default_factory=dict)
    # pids whose stat every pass reads (the last targets' trees and the orphans: what the loop
    # acts on; set by the caller)
    watched: frozenset[int] = frozenset()

    def for_pass(self, now: float, skip: frozenset[ProcKey]) -> DiscoveryCache:
        """A copy for one pass: a pass abandoned mid-read never touches the cache of the next."""
        return DiscoveryCache(
            owners=dict(self.owners),
            ports=dict(self.ports),
            cmdlines=dict(self.cmdlines),
            now=now,
            skip=skip,
            stats=dict(self.stats),
            watched=self.watched,
        )


class Snapshot:
    """One pass over /proc: every process's key, ppid, cmdline; children by ppid; lazily, fds."""

    def __init__(self, procfs: ProcFS, cache: DiscoveryCache | None = None):
        self.procfs = procfs
        self.cache = cache
        self.procs: dict[int, Proc] = {}
        known = cache.cmdlines if cache is not None else {}
        now = cache.now if cache is not None else 0.0
        skip = cache.skip if cache is not None else frozenset()
        keys = cache.keys if cache is not None else {}
        stats = cache.stats if cache is not None else {}
        watched = cache.watched if cache is not None else frozenset()
        fresh: dict[int, tuple[ProcKey, int, str, float]] = {}
        seen: dict[ProcKey, tuple[tuple[str, ...], float]] = {}
        listed = procfs.pids()
        alive = set(listed)
        for pid in listed:
            try:
                was = stats.get(pid)
                same = was is not None and pid not in watched and now - was[3] < STAT_REFRESH_S
                if was is not None and same and (was[1] in alive or was[1] == 0):  # 0: no parent in this pid ns
                    key, ppid, state, _ = fresh[pid] = was
                else:
                    st = procfs.stat(pid)
                    key, ppid, state = ProcKey(pid, st.starttime), st.ppid, st.state
                    fresh[pid] = (key, ppid, state, now)
                keys[pid] = key
                cached = known.get(key)
                if cached is not None and (now - cached[1] >= CMDLINE_SETTLE_S or key in skip):
                    cmdline = cached[0]  # a process's title settles at start (setproctitle)
                elif key in skip:
                    continue  # its cmdline read blocked an earlier pass: unreadable
                else:
                    cmdline = procfs.cmdline(pid)
                    cached = (cmdline, cached[1] if cached else now)
            except (TargetGone, AccessDenied, ProbeFailed):
                continue
            seen[key] = cached
            self.procs[pid] = Proc(key, ppid, state, cmdline)
        if cache is not None:
            cache.cmdlines = seen  # only processes alive now: the cache never grows unbounded
            cache.stats = fresh
        self.children = proctree.children_by_parent((p.key.pid, p.ppid) for p in self.procs.values())
        self._listening: dict[int, set[int]] | None = None
        self._owners: dict[int, set[int]] | None = None
        self.denied: set[int] = set()  # pids whose fd table answered EACCES this pass
        self.by_argv: set[int] = set()  # roots matched by the port their argv names (not verified)
        self.addresses: dict[int, tuple[str | None, int | None]] = {}  # root -> (host, port) from a pod

    def ancestors(self, pid: int) -> list[int]:
        out: list[int] = []
        seen = {pid}
        p = self.procs.get(pid)
        while p is not None and p.ppid in self.procs and p.ppid not in seen:
            out.append(p.ppid)
            seen.add(p.ppid)
            p = self.procs[p.ppid]
        return out

    def tree(self, root: int) -> list[int]:
        """root first, then every descendant breadth-first."""
        return proctree.walk(root, self.children)

    def topmost(self, pids: set[int]) -> int | None:
        """The member with no ancestor in the set; the earliest started when there are several."""
        tops = [p for p in pids if not set(self.ancestors(p)) & pids]
        if not tops:
            return None
        return min(tops, key=lambda p: (self.procs[p].key.starttime, p))

    def listens(self, port: int) -> bool:
        """Does any TCP socket of this network namespace listen on ``port``?"""
        if self._listening is None:
            self._listening = self.procfs.listening_ports()
        return bool(self._listening.get(port))

    def listening_owners(self, port: int) -> set[int] | None:
        """The owners of the sockets listening on ``port`` (``port_owners``), or None when nothing
        listens there: the last pass's owners when still valid (one fd table read), else one read
        of net/tcp; every process's fds are read only when a socket listens and its owner is new."""
        held = self._cached_owners(self.cache.ports.get(port, ())) if self.cache is not None else None
        if held is not None:
            return held
        if not self.listens(port):
            return None
        return self.port_owners(port)

    def readable_fds(self, pids: Iterable[int]) -> bool:
        """Can every one of these processes' fd tables be read (else an owner may hide there)?"""
        for pid in pids:
            try:
                self.procfs.socket_inodes(pid)
            except TargetGone:
                continue
            except AccessDenied:
                self.denied.add(pid)
                return False
            except ProbeFailed:
                return False
        return True

    def port_owners(self, port: int) -> set[int]:
        held = self._cached_owners(self.cache.ports.get(port, ())) if self.cache is not None else None
        if held is not None:
            return held  # the last pass's listeners, still alive and holding the same sockets
        if self._listening is None:
            self._listening = self.procfs.listening_ports()
        if self.cache is not None:
            self.cache.ports[port] = frozenset(self._listening.get(port, ()))
        cached = self._cached_owners(self._listening.get(port, ()))
        if cached is not None:
            return cached
        if self._owners is None:
            self._owners = {}
            for pid in self.procs:
                try:
                    inodes = self.procfs.socket_inodes(pid)
                except AccessDenied:
                    self.denied.add(pid)
                    continue
                except (TargetGone, ProbeFailed):
                    continue
                for inode in inodes:
                    self._owners.setdefault(inode, set()).add(pid)
        owners: set[int] = set()
        for inode in self._listening.get(port, ()):
            found = self._owners.get(inode, set())
            owners |= found
            if self.cache is not None:
                self.cache.owners[inode] = frozenset(self.procs[p].key for p in found)
        return owners

    def _cached_owners(self, inodes: Iterable[int]) -> set[int] | None:
        """The owners of these socket inodes found by an earlier pass, if every one still lives
        with the same starttime and still holds its socket: one process's fds read instead of
        every process's. None when any is unknown, gone or let go (a full search then)."""
        if self.cache is None:
            return None
        owners: set[int] = set()
        for inode in inodes:
            keys = self.cache.owners.get(inode)
            if not keys:
                return None
            for key in keys:
                p = self.procs.get(key.pid)
                if p is None or p.key != key:
                    return None
                try:
                    if inode not in self.procfs.socket_inodes(key.pid):
                        return None
                except (TargetGone, AccessDenied, ProbeFailed):
                    return None
                owners.add(key.pid)
        return owners or None

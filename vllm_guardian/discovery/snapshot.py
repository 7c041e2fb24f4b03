"""One pass over /proc for discovery, and what the next pass may take from it unread.

Reads, through ``ProcFS``, every process's stat and cmdline (a title that settled, or a stat read
less than ``STAT_REFRESH_S`` ago, is taken from the ``DiscoveryCache``), lazily the listening
sockets of a port with their addresses (``/proc/net/tcp{,6}``; an IPv6 one's ``IPV6_V6ONLY`` flag
through the ``v6only`` seam, ``host.sockdiag``, only when it decides) and the fd tables that hold
the ones serving an address (the last pass's holders are checked first: one fd table read
instead of every process's). Which sockets serve an address is ``discovery/serving.py``'s rule;
what a target is, the scan's (``discovery/scan.py``) and the socket rule's
(``discovery/sockets.py``): they ask this module questions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

from vllm_guardian import proctree
from vllm_guardian.discovery.serving import Address, Served, served_by, v6only_matters
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.procfs_parse import Listener
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
# who serves an address is taken from the last pass this long at most (while its holders hold
# their sockets): a socket that now ranks above them (SO_REUSEPORT, a more specific bind) is seen
LISTEN_REFRESH_S = 30.0


@dataclass(frozen=True)
class Listening:
    """What a pass found serving one (address, port): kept for the next passes."""

    inodes: frozenset[int]  # the sockets a connection reaches (several: SO_REUSEPORT)
    listening: int  # sockets listening on the port, any address
    assumed: bool  # an IPv6 [::] socket of unknown IPV6_V6ONLY taken to serve an IPv4 address
    read_at: float  # the pass's monotonic time


@dataclass(frozen=True)
class Holders:
    """Who serves an (address, port) this pass."""

    listening: int  # sockets listening on the port, any address (0: nothing listens there)
    serving: frozenset[int]  # inodes of the sockets a connection to the address reaches
    pids: frozenset[int]  # the processes holding them (readable ones)
    unowned: int  # serving sockets no readable process holds (another user's, unprivileged)
    assumed: bool = False

    @property
    def others(self) -> int:
        """Sockets on the port that do not serve the address (another address or family)."""
        return self.listening - len(self.serving)


@dataclass
class DiscoveryCache:
    """What one pass learnt that the next can check cheaply: which processes own which
    listening socket inodes (finding them means reading every process's fd table)."""

    owners: dict[int, frozenset[ProcKey]] = field(default_factory=dict)
    # (address, port) -> the sockets found serving it: while their owners live and hold them
    # (and for LISTEN_REFRESH_S at most), the next pass reads one process's fds, not /proc/net/tcp
    # (whose read walks the kernel's whole connection table: ~1.6 ms per file on a small host)
    ports: dict[tuple[str, int], Listening] = field(default_factory=dict)
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


def _unknown(port: int) -> Mapping[int, bool]:
    return {}


class Snapshot:
    """One pass over /proc: every process's key, ppid, cmdline; children by ppid; lazily, fds."""

    def __init__(
        self,
        procfs: ProcFS,
        cache: DiscoveryCache | None = None,
        v6only: Callable[[int], Mapping[int, bool]] | None = None,
    ):
        """``v6only(port)``: inode → ``IPV6_V6ONLY`` of the IPv6 sockets listening on the port
        (``host.sockdiag.v6only_listeners``); None: unknown."""
        self.procfs = procfs
        self.cache = cache
        self.v6only = v6only or _unknown
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
        self._listening: dict[int, list[Listener]] | None = None
        self._owners: dict[int, set[int]] | None = None
        self.denied: set[int] = set()  # pids whose fd table answered EACCES this pass
        self.by_argv: set[int] = set()  # roots matched by the port their argv names (not verified)
        self.assumed: set[int] = set()  # roots matched by a [::] socket of unknown IPV6_V6ONLY
        self.others: dict[int, int] = {}  # root -> sockets on its port that do not serve its URL
        self.addresses: dict[int, tuple[str | None, int | None]] = {}  # root -> (host, port) from a pod
        self.pods: dict[int, tuple[str, str]] = {}  # root -> (namespace, name) of its pod

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

    def listeners(self, port: int) -> list[Listener]:
        """Every TCP socket listening on ``port``, any address (one read of net/tcp{,6} a pass)."""
        if self._listening is None:
            self._listening = self.procfs.listening_sockets()
        return self._listening.get(port, [])

    def _served(self, address: Address | None, port: int) -> tuple[list[Listener], Served]:
        socks = self.listeners(port)
        if v6only_matters(socks, address):
            try:
                flags = self.v6only(port)
            except (AccessDenied, ProbeFailed):
                flags = {}  # unknown: served_by assumes, and says so
            socks = [replace(s, v6only=flags.get(s.inode)) if s.ipv6 else s for s in socks]
        return socks, served_by(socks, address)

    def holders(self, address: Address | None, port: int) -> Holders:
        """Who serves ``address:port`` (``discovery.serving``): the sockets a connection reaches and
        the processes holding them. The last pass's answer is kept while its holders live and hold
        the same sockets, for at most ``LISTEN_REFRESH_S`` (a pass then reads one fd table, not
        /proc/net/tcp); else net/tcp is read, and every process's fds when a holder is new."""
        where = (str(address) if address is not None else "", port)
        if self.cache is not None:
            was = self.cache.ports.get(where)
            if was is not None and self.cache.now - was.read_at < LISTEN_REFRESH_S:
                held = self._cached_owners(was.inodes)
                if held is not None:
                    pids = frozenset(p for ps in held.values() for p in ps)
                    return Holders(was.listening, was.inodes, pids, 0, was.assumed)
        socks, served = self._served(address, port)
        inodes = frozenset(s.inode for s in served.sockets)
        owners = self._owners_of(inodes)
        pids = frozenset(p for ps in owners.values() for p in ps)
        unowned = sum(1 for i in inodes if not owners.get(i))
        if self.cache is not None:
            self.cache.ports[where] = Listening(inodes, len(socks), served.assumed, self.cache.now)
        return Holders(len(socks), inodes, pids, unowned, served.assumed)

    def one_tree(self, pids: Iterable[int]) -> int | None:
        """The process whose tree holds every one of ``pids`` (the top-most of them), or None when
        they lie in separate trees (none of them is *the* owner)."""
        held = set(pids)
        top = self.topmost(held)
        if top is None or not held <= set(self.tree(top)):
            return None
        return top

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

    def _owners_of(self, inodes: frozenset[int]) -> dict[int, set[int]]:
        """inode → the processes holding it: the last pass's holders when still valid, else every
        process's fd table read once this pass (refused ones noted in ``denied``)."""
        if not inodes:
            return {}
        cached = self._cached_owners(inodes)
        if cached is not None:
            return cached
        if self._owners is None:
            self._owners = {}
            for pid in self.procs:
                try:
                    held = self.procfs.socket_inodes(pid)
                except AccessDenied:
                    self.denied.add(pid)
                    continue
                except (TargetGone, ProbeFailed):
                    continue
                for inode in held:
                    self._owners.setdefault(inode, set()).add(pid)
        out = {inode: set(self._owners.get(inode, ())) for inode in inodes}
        if self.cache is not None:
            for inode, found in out.items():
                self.cache.owners[inode] = frozenset(self.procs[p].key for p in found)
        return out

    def _cached_owners(self, inodes: Iterable[int]) -> dict[int, set[int]] | None:
        """inode → its holders as found by an earlier pass, if every one still lives with the same
        starttime and still holds its socket: one process's fds read instead of every process's.
        None when any is unknown, gone or let go, or there are none (a full search then)."""
        if self.cache is None:
            return None
        out: dict[int, set[int]] = {}
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
                out.setdefault(inode, set()).add(key.pid)
        return out or None

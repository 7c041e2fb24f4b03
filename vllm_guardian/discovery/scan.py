"""Discovery: which vLLM servers run on this node, and every process of each one's tree.

Reads /proc through ``ProcFS`` (one pass: stat + cmdline of every pid; the fd
scan only when a ``port`` matcher is configured, once per pass) and decides:
- explicit ``targets:`` from config, matched by ``port`` (owner of the LISTEN
  socket's inode; the top-most ancestor when several processes hold it; where a socket listens
  on the port but its owner's fds cannot be read (another user's, unprivileged): the vLLM API
  server whose argv names the port, ``socket="argv"``, never restarted on that word:
  ``vllm_guardian.discovery.argv``),
  ``pid_file`` or ``cmdline_regex`` (the top-most matching ancestor), or
  ``kubernetes`` / ``systemd_unit`` (their cgroups: ``vllm_guardian.discovery.platform_match``);
- autodiscovered servers (``vllm serve …``, ``python -m …api_server``,
  ``…/api_server.py``) not already inside another target's tree, trusted by their sockets, not
  their argv (any local user can start a process whose argv says ``vllm serve --port 8000``):
  a candidate is a server only if its tree holds the listening socket of the URL it would be
  reached at (``socket="owned"``), or while nothing listens on that port at all (a server
  still loading its model, ``socket="starting"``); a port held by a process outside its tree
  rules it out. Of several candidates for one URL the socket's owner wins (while none owns
  it, the first started); the others are ``ignored`` with the reason. Where the guardian
  cannot read the fds of the processes involved (another user's, unprivileged) it cannot
  tell, keeps the first started with ``socket="unverified"`` and says so. A ``--host`` is
  followed only when it is an IP literal of loopback or of this node (pod); any other
  (another machine, a name) makes the candidate ignored: configure a target to follow it;
- each target's tree (all descendants by ppid) with roles from the cmdline
  prefix (``VLLM::EngineCore*``, ``VLLM::Worker*``, ``VLLM::APIServer*``);
- orphans: ``<prefix>::`` processes in no tree (e.g. an EngineCore re-parented
  after its API server was SIGKILLed; the daemon attaches them by ProcKey).
Processes that vanish or refuse reads mid-scan are skipped.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable
from urllib.parse import urlsplit

from vllm_guardian.config.schema import Config, TargetConfig
from vllm_guardian.discovery.argv import ARGV, DEFAULT_PORT, argv_candidates, is_api_server, option_value
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian import proctree
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target

if TYPE_CHECKING:
    from vllm_guardian.discovery.platform_match import PlatformMatcher

_ANY_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class DiscoveryResult:
    targets: tuple[Target, ...]
    orphans: tuple[ProcessInfo, ...]
    unmatched: tuple[tuple[str, str], ...]  # (target name, why)
    # autodiscovery candidates not followed: (their identity, why); reported once by the caller
    ignored: tuple[tuple[ProcKey, str], ...] = ()
    # pids whose fd table answered EACCES (another user's): the guardian cannot read every socket
    fds_denied: tuple[int, ...] = ()

    @property
    def sockets_denied(self) -> bool:
        return bool(self.fds_denied)

    def target(self, name: str) -> Target | None:
        for t in self.targets:
            if t.name == name:
                return t
        return None


@dataclass(frozen=True)
class _Proc:
    key: ProcKey
    ppid: int
    state: str
    cmdline: tuple[str, ...]


# ---------------------------------------------------------------- pure helpers
def server_port(cmdline: Iterable[str]) -> int:
    value = option_value(cmdline, "--port")
    try:
        port = int(value) if value is not None else DEFAULT_PORT
    except ValueError:
        return DEFAULT_PORT
    return port if 0 < port < 65536 else DEFAULT_PORT


def server_host(cmdline: Iterable[str]) -> str:
    """The host to reach the server on: the bind address, or loopback when it binds all. Only
    an IP literal is taken from a command line (any local user can start a "vLLM" whose
    ``--host`` names a machine elsewhere; a name would send the guardian's requests there)."""
    host = option_value(cmdline, "--host")
    if host is None or host in _ANY_HOSTS:
        return "127.0.0.1"
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "127.0.0.1"
    return host.strip("[]")


def autodiscovered_host(cmdline: Iterable[str], local: Callable[[str], bool]) -> tuple[str | None, str]:
    """(host, "") to reach an autodiscovered server on, or (None, why) when its ``--host`` is
    not followed: only loopback, binding all, or an IP literal of this node (``local``) is; a
    name or another machine's address would send the guardian's requests (and the server's
    API key) wherever a process's argv says."""
    host = option_value(cmdline, "--host")
    if host is None or host in _ANY_HOSTS or host == "localhost":
        return "127.0.0.1", ""
    literal = host.strip("[]")
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        return None, f"--host {host[:64]!r} is a name, not an address of this node: not followed (configure a target)"
    if ip.is_loopback or local(str(ip)):
        return literal, ""
    return None, f"--host {literal} is not an address of this node: not followed (configure a target)"


def node_addresses() -> frozenset[str]:
    """Every IP address of this node's (or pod's) interfaces (psutil's getifaddrs)."""
    import socket

    import psutil

    out: set[str] = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    out.add(str(ipaddress.ip_address(a.address.split("%", 1)[0])))
                except ValueError:
                    continue
    return frozenset(out)


def url_for(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def classify(cmdline: tuple[str, ...], prefix: str) -> Role:
    """Role of a descendant from its title (cmdline[0]); vLLM sets it with setproctitle."""
    title = cmdline[0] if cmdline else ""
    for name, role in (("EngineCore", Role.ENGINE_CORE), ("Worker", Role.WORKER), ("APIServer", Role.API_SERVER)):
        if title.startswith(f"{prefix}::{name}"):
            return role
    return Role.OTHER


# ---------------------------------------------------------------- the snapshot
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


class _Snapshot:
    """One pass over /proc: every process's key, ppid, cmdline; children by ppid; lazily, fds."""

    def __init__(self, procfs: ProcFS, cache: DiscoveryCache | None = None):
        self.procfs = procfs
        self.cache = cache
        self.procs: dict[int, _Proc] = {}
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
            self.procs[pid] = _Proc(key, ppid, state, cmdline)
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


PID_FILE_MAX = 64


def read_pid_file(path: str, proc_root: str = "/proc") -> str:
    """A pid file's first few bytes, read without ever blocking the loop: regular files only
    (a FIFO or a device is refused before any read; opened non-blocking), at most
    ``PID_FILE_MAX`` bytes, not writable by group or others, and owned by root, the guardian's
    user or the owner of the process it names. Raises ``OSError`` saying what is wrong."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise OSError(errno.EPERM, "writable by others than its owner")
        text = os.read(fd, PID_FILE_MAX).decode("utf-8", errors="replace")
    finally:
        os.close(fd)
    if st.st_uid not in (0, os.geteuid()):
        try:
            proc_uid = os.stat(os.path.join(proc_root, str(int(text.strip())))).st_uid
        except (ValueError, OSError):
            proc_uid = None
        if proc_uid != st.st_uid:
            raise OSError(errno.EPERM, f"owned by uid {st.st_uid}, who does not own the process it names")
    return text


def _read_file(path: str) -> str:
    return read_pid_file(path)


# ---------------------------------------------------------------- matching
def _match(
    snap: _Snapshot, tc: TargetConfig, read_file: Callable[[str], str], platform: PlatformMatcher | None = None
) -> tuple[int | None, str]:
    """(root pid, "") or (None, why); a platform match leaves its address in ``snap.addresses``."""
    m = tc.match
    if m.port is not None:
        try:
            owners = snap.port_owners(m.port)
        except (TargetGone, AccessDenied, ProbeFailed) as e:
            return None, f"cannot read listening sockets: {e}"
        if owners:
            return snap.topmost(owners), ""
        if not snap.listens(m.port):
            return None, f"no process listens on port {m.port}"
        by_argv = argv_candidates(m.port, snap.denied, {pid: p.cmdline for pid, p in snap.procs.items()})
        if by_argv:  # another user's server: its argv names the port, its fds cannot be read
            root = snap.topmost(by_argv)
            if root is not None:
                snap.by_argv.add(root)
            return root, ""
        if snap.denied:
            return None, (
                f"a socket listens on port {m.port}, the guardian cannot read its owner's fds "
                "(another user's process) and no vLLM command line names the port"
            )
        return None, f"no process listens on port {m.port}"
    if m.pid_file is not None:
        try:
            text = read_file(m.pid_file)
        except OSError as e:
            return None, f"pid file {m.pid_file}: {e.strerror or e}"
        try:
            pid = int(text.strip())
        except ValueError:
            return None, f"pid file {m.pid_file}: not a pid: {text.strip()[:40]!r}"
        if pid not in snap.procs or snap.procs[pid].state in ("Z", "X"):
            return None, f"pid {pid} from {m.pid_file} is not running"
        return pid, ""
    if m.cmdline_regex is not None:
        try:
            rx = re.compile(m.cmdline_regex)
        except re.error as e:
            return None, f"bad cmdline_regex: {e}"
        hits = {pid for pid, p in snap.procs.items() if p.cmdline and rx.search(" ".join(p.cmdline))}
        if not hits:
            return None, f"no process cmdline matches {m.cmdline_regex!r}"
        return snap.topmost(hits), ""
    if m.systemd_unit is not None or m.kubernetes is not None:
        if platform is None:
            return None, "no platform matcher wired (kubernetes / systemd)"
        found = platform.match(tc, snap.procs)
        if not found.pids:
            return None, found.why
        root = snap.topmost(set(found.pids))
        if root is not None:
            snap.addresses[root] = (found.host, found.port)
        return root, ""
    return None, "no matcher configured"


def _port_from_url(url: str | None) -> int | None:
    if not url:
        return None
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def _build(
    snap: _Snapshot, root: int, name: str, prefix: str, port: int, api_url: str, source: str, socket_state: str = ""
) -> Target:
    procs = []
    for pid in snap.tree(root):
        p = snap.procs[pid]
        role = Role.API_SERVER if pid == root else classify(p.cmdline, prefix)
        procs.append(ProcessInfo(key=p.key, ppid=p.ppid, role=role, cmdline=p.cmdline))
    return Target(
        name=name,
        key=snap.procs[root].key,
        processes=tuple(procs),
        port=port,
        api_url=api_url,
        source=source,
        socket=socket_state,
    )


def _socket_state(snap: _Snapshot, root: int, port: int) -> tuple[str, str]:
    """(state, why) of a candidate's claim on ``port``: "owned" (its tree holds the listening
    socket), "starting" (nothing listens on the port yet), "unverified" (a socket listens but
    neither its owner nor the candidate's fds can be read), or "" with why it is refused."""
    try:
        owners = snap.listening_owners(port)
        if owners is None:
            return "starting", ""
    except (TargetGone, AccessDenied, ProbeFailed) as e:
        return "unverified", f"cannot read listening sockets: {e}"
    tree = set(snap.tree(root))
    if owners & tree:
        return "owned", ""
    if owners:
        holder = snap.topmost(owners)
        return "", f"port {port} is held by pid {holder}, not by this process or its children"
    if snap.readable_fds(tree):
        return "", f"port {port} is held by a process the guardian cannot read, not by this process or its children"
    return "unverified", ""


_RANK = {"owned": 0, "starting": 1, "unverified": 2}


def _trusted(
    snap: _Snapshot,
    roots: list[int],
    taken: set[str],
    ignored: list[tuple[ProcKey, str]],
    local_addresses: Callable[[], frozenset[str]],
) -> list[tuple[int, int, str, str]]:
    """The autodiscovery candidates followed, as (root, port, url, socket state), in start
    order: one per URL, its socket's owner first, else the first started; the rest land in
    ``ignored`` with why."""
    local_cache: list[frozenset[str]] = []

    def local(ip: str) -> bool:
        if not local_cache:
            try:
                local_cache.append(local_addresses())
            except Exception:  # noqa: BLE001 - no addresses known: only loopback is followed
                local_cache.append(frozenset())
        return ip in local_cache[0]

    best: dict[str, tuple[int, int, int, str]] = {}  # url -> (rank, root, port, state)
    for root in roots:
        cmdline = snap.procs[root].cmdline
        key = snap.procs[root].key
        host, why = autodiscovered_host(cmdline, local)
        if host is None:
            ignored.append((key, why))
            continue
        port = server_port(cmdline)
        url = url_for(host, port)
        if url in taken:
            ignored.append((key, f"{url} is already a configured target's"))
            continue
        state, why = _socket_state(snap, root, port)
        if not state:
            ignored.append((key, why))
            continue
        held = best.get(url)
        if held is None or _RANK[state] < held[0]:
            if held is not None:
                ignored.append((snap.procs[held[1]].key, _second(url, root, state)))
            best[url] = (_RANK[state], root, port, state)
        else:
            ignored.append((key, _second(url, held[1], held[3])))
    chosen = sorted(best.items(), key=lambda kv: (snap.procs[kv[1][1]].key.starttime, kv[1][1]))
    return [(root, port, url, state) for url, (_rank, root, port, state) in chosen]


def _second(url: str, winner: int, state: str) -> str:
    why = "owns its listening socket" if state == "owned" else "started first"
    return f"another candidate for {url}: pid {winner} {why}"


def discover(
    procfs: ProcFS,
    cfg: Config,
    *,
    read_file: Callable[[str], str] | None = None,
    cache: DiscoveryCache | None = None,
    platform: PlatformMatcher | None = None,
    local_addresses: Callable[[], frozenset[str]] = node_addresses,
) -> DiscoveryResult:
    """One discovery pass. ``read_file`` is the seam for reading pid files (default: open);
    ``cache`` (kept by the caller between passes) spares the fd scan when port owners are unchanged;
    ``platform`` answers ``match.kubernetes`` / ``match.systemd_unit``; ``local_addresses``
    (read once, when a candidate names a ``--host``) are this node's IP addresses."""
    read_file = read_file or _read_file
    prefix = cfg.discovery.process_name_prefix
    snap = _Snapshot(procfs, cache)
    targets: list[Target] = []
    unmatched: list[tuple[str, str]] = []
    claimed: dict[int, str] = {}  # pid -> target name, for every process of every tree

    for tc in cfg.targets:
        root, why = _match(snap, tc, read_file, platform)
        if root is None:
            unmatched.append((tc.name, why))
            continue
        owner = next((t.name for t in targets if t.key.pid == root), None)
        if owner is not None:
            unmatched.append((tc.name, f"process {root} is already target {owner}"))
            continue
        cmdline = snap.procs[root].cmdline
        pod_host, pod_port = snap.addresses.get(root, (None, None))
        port = tc.match.port or _port_from_url(tc.api_url) or pod_port or server_port(cmdline)
        api_url = tc.api_url or url_for(pod_host or server_host(cmdline), port)
        socket_state = ARGV if root in snap.by_argv else ""
        target = _build(snap, root, tc.name, prefix, port, api_url, "config", socket_state)
        targets.append(target)
        for p in target.processes:
            claimed.setdefault(p.pid, tc.name)

    ignored: list[tuple[ProcKey, str]] = []
    if cfg.autodiscover:
        candidates = {pid for pid, p in snap.procs.items() if is_api_server(p.cmdline)}
        blocked = candidates | set(claimed)
        roots = [pid for pid in candidates if pid not in claimed and not blocked.intersection(snap.ancestors(pid))]
        roots.sort(key=lambda pid: (snap.procs[pid].key.starttime, pid))
        taken = {t.api_url for t in targets if t.api_url}
        names = {t.name for t in targets}
        for root, port, url, socket_state in _trusted(snap, roots, taken, ignored, local_addresses):
            name = f"vllm-{port}"
            if name in names:
                name = f"{name}-{root}"
            names.add(name)
            target = _build(snap, root, name, prefix, port, url, "autodiscover", socket_state)
            targets.append(target)
            for p in target.processes:
                claimed.setdefault(p.pid, name)

    marker = f"{prefix}::"
    orphans = tuple(
        ProcessInfo(key=p.key, ppid=p.ppid, role=classify(p.cmdline, prefix), cmdline=p.cmdline)
        for pid, p in sorted(snap.procs.items())
        if pid not in claimed and p.cmdline and p.cmdline[0].startswith(marker)
    )
    return DiscoveryResult(tuple(targets), orphans, tuple(unmatched), tuple(ignored), tuple(sorted(snap.denied)))


__all__ = [
    "DiscoveryCache",
    "DiscoveryResult",
    "discover",
    "is_api_server",
    "classify",
    "server_port",
    "server_host",
    "option_value",
    "url_for",
]

"""Discovery: which vLLM servers run on this node, and every process of each one's tree.

Reads /proc through one pass of ``discovery/snapshot.py`` (stat + cmdline, new pids read and known
ones taken from the cache; the fd scan only when a ``port`` matcher is configured) and decides:
- explicit ``targets:`` from config, matched by ``port`` (the process tree holding the socket
  that serves the target's address on that port, as the kernel picks it: ``discovery/serving.py``;
  the address is its ``api_url``'s host, else 127.0.0.1, never a process's ``--host``; a socket
  on another address or family (a neighbour on ``127.0.0.2:P``, an IPv6-only ``[::]:P``) is not
  it, and sockets that share the address (``SO_REUSEPORT``) held by separate trees match none:
  "ambiguous"; the top-most of the tree's holders is the root; where a socket serves it but its
  owner's fds cannot be read (another user's, unprivileged): the vLLM API server whose argv
  names the port, ``socket="argv"``, never restarted on that word: ``vllm_guardian.discovery.argv``),
  ``pid_file`` or ``cmdline_regex`` (the top-most matching ancestor), or
  ``kubernetes`` / ``systemd_unit`` (their cgroups: ``vllm_guardian.discovery.platform_match``);
- autodiscovered servers (``vllm serve …``, ``python -m …api_server``,
  ``…/api_server.py``) not already inside another target's tree, trusted by their sockets, not
  their argv (any local user can start a process whose argv says ``vllm serve --port 8000``):
  a candidate is a server only if its tree holds the socket serving the address and port of the
  URL it would be reached at (``socket="owned"``), or while nothing listens on that port at all
  (a server still loading its model, ``socket="starting"``); that address served by a process
  outside its tree, or only other addresses listening on the port, rules it out. Of several
  candidates for one URL the socket's owner wins (while none owns it, the first started); the
  others are ``ignored`` with the reason. Where the guardian
  cannot read the fds of the processes involved (another user's, unprivileged) it cannot
  tell, keeps the first started with ``socket="unverified"`` and says so. A ``--host`` is
  followed only when it is an IP literal of loopback or of this node (pod); any other
  (another machine, a name) makes the candidate ignored: configure a target to follow it;
- each target's tree (all descendants by ppid) with roles from the cmdline
  prefix (``VLLM::EngineCore*``, ``VLLM::Worker*``, ``VLLM::APIServer*``);
- orphans: ``<prefix>::`` processes in no tree (e.g. an EngineCore re-parented
  after its API server was SIGKILLed; the daemon attaches them by ProcKey).
Processes that vanish or refuse reads mid-scan are skipped. The pass over /proc and its cache are
``discovery/snapshot.py``'s; the addresses and the socket-ownership rule of autodiscovery are
``discovery/sockets.py``'s; this module matches, builds the trees and finds the orphans.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping
from urllib.parse import urlsplit

from vllm_guardian.config.schema import Config, TargetConfig
from vllm_guardian.discovery.argv import ARGV, ASSUMED, argv_candidates, is_api_server, option_value
from vllm_guardian.discovery.serving import AMBIGUOUS, LOOPBACK, Address, show, url_address
from vllm_guardian.discovery.snapshot import DiscoveryCache, Snapshot
from vllm_guardian.discovery.sockets import node_addresses, server_host, server_port, trusted, url_for
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.server_files import Opener, ServerFiles, open_read
from vllm_guardian.host.sockdiag import v6only_listeners
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target

if TYPE_CHECKING:
    from vllm_guardian.discovery.platform_match import PlatformMatcher


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


# ---------------------------------------------------------------- pure helpers
def classify(cmdline: tuple[str, ...], prefix: str) -> Role:
    """Role of a descendant from its title (cmdline[0]); vLLM sets it with setproctitle."""
    title = cmdline[0] if cmdline else ""
    for name, role in (("EngineCore", Role.ENGINE_CORE), ("Worker", Role.WORKER), ("APIServer", Role.API_SERVER)):
        if title.startswith(f"{prefix}::{name}"):
            return role
    return Role.OTHER


PID_FILE_MAX = 64


def read_pid_file(path: str, proc_root: str = "/proc", *, opener: Opener = open_read) -> str:
    """A pid file's first few bytes, read without ever blocking the loop: regular files only
    (a FIFO or a device is refused before any read; opened non-blocking), at most
    ``PID_FILE_MAX`` bytes, not writable by group or others, and owned by root, the guardian's
    user or the owner of the process it names; opened as ``host.server_files`` opens a file on a
    server's behalf (a symbolic link the server's user could change is refused: one to another
    service's pid file would make that service the target). Raises ``OSError`` saying what is wrong."""
    fd = opener(path)
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


def pid_file_reader(files: ServerFiles) -> Callable[[str], str]:
    """``read_pid_file`` with its refusals counted under ``match.pid_file``."""
    return partial(read_pid_file, opener=files.reader("match.pid_file"))


# ---------------------------------------------------------------- matching
def port_target_address(tc: TargetConfig) -> Address | None:
    """The address a ``port`` target is reached at: its ``api_url``'s host (None: a name, not
    resolved), else 127.0.0.1 (the documented default URL); never a process's argv."""
    if tc.api_url is None:
        return LOOPBACK
    try:
        return url_address(urlsplit(tc.api_url).hostname)
    except ValueError:
        return None


def _match_port(snap: Snapshot, tc: TargetConfig, port: int) -> tuple[int | None, str]:
    """The process tree that holds the socket serving the target's address and port
    (``discovery.serving``): the kernel's choice, not any socket on the port; sockets that share
    it (``SO_REUSEPORT``) held by separate trees make no match ("ambiguous")."""
    address = port_target_address(tc)
    where = show(address, port)
    try:
        h = snap.holders(address, port)
    except (TargetGone, AccessDenied, ProbeFailed) as e:
        return None, f"cannot read listening sockets: {e}"
    if not h.serving:
        if h.listening:
            bound = sorted({s.address for s in snap.listeners(port)})
            return None, (
                f"no socket serves {where}; {h.listening} listen on port {port} at {', '.join(bound[:4])}"
                f"{' …' if len(bound) > 4 else ''} (set api_url to the address the server listens on)"
            )
        return None, f"no process listens on port {port}"
    if h.pids:
        root = snap.one_tree(h.pids)
        if root is None or h.unowned:
            shown = ", ".join(str(p) for p in sorted(h.pids)[:6])
            unreadable = " and processes the guardian cannot read" if h.unowned else ""
            shared = " (SO_REUSEPORT)" if len(h.serving) > 1 else ""
            return None, (
                f"{AMBIGUOUS}{where} is served by {len(h.serving)} socket(s){shared} held by pids {shown}{unreadable} "
                "in separate process trees: none of them is taken for this target"
            )
        if h.assumed:
            snap.assumed.add(root)
        snap.others[root] = h.others
        return root, ""
    by_argv = argv_candidates(port, snap.denied, {pid: p.cmdline for pid, p in snap.procs.items()})
    if by_argv:  # another user's server: its argv names the port, its fds cannot be read
        root = snap.topmost(by_argv)
        if root is not None:
            snap.by_argv.add(root)
            snap.others[root] = h.others
        return root, ""
    if snap.denied:
        return None, (
            f"a socket serves {where}, the guardian cannot read its owner's fds "
            "(another user's process) and no vLLM command line names the port"
        )
    return None, f"a socket serves {where} but no process holds it (it is closing)"


def _match(
    snap: Snapshot, tc: TargetConfig, read_file: Callable[[str], str], platform: PlatformMatcher | None = None
) -> tuple[int | None, str]:
    """(root pid, "") or (None, why); a platform match leaves its address in ``snap.addresses``."""
    m = tc.match
    if m.port is not None:
        return _match_port(snap, tc, m.port)
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
            if found.pod is not None:
                snap.pods[root] = found.pod
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
    snap: Snapshot,
    root: int,
    name: str,
    prefix: str,
    port: int,
    api_url: str,
    source: str,
    socket_state: str = "",
    others: int = 0,
) -> Target:
    pod = snap.pods.get(root)
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
        other_listeners=others,
        namespace=pod[0] if pod else None,
        pod=pod[1] if pod else None,
    )


def discover(
    procfs: ProcFS,
    cfg: Config,
    *,
    read_file: Callable[[str], str] | None = None,
    cache: DiscoveryCache | None = None,
    platform: PlatformMatcher | None = None,
    local_addresses: Callable[[], frozenset[str]] = node_addresses,
    v6only: Callable[[int], Mapping[int, bool]] = v6only_listeners,
) -> DiscoveryResult:
    """One discovery pass. ``read_file`` is the seam for reading pid files (default: open);
    ``cache`` (kept by the caller between passes) spares the fd scan when port owners are unchanged;
    ``platform`` answers ``match.kubernetes`` / ``match.systemd_unit``; ``local_addresses``
    (read once, when a candidate names a ``--host``) are this node's IP addresses; ``v6only``
    (asked only when an IPv6 ``[::]`` socket's flag decides who serves an IPv4 address) is the
    kernel's ``IPV6_V6ONLY`` per socket inode (``host.sockdiag``)."""
    read_file = read_file or _read_file
    prefix = cfg.discovery.process_name_prefix
    snap = Snapshot(procfs, cache, v6only)
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
        if tc.match.port is not None:  # reached where its socket was matched: never at its argv's --host
            api_url = tc.api_url or url_for(str(LOOPBACK), port)
        else:
            api_url = tc.api_url or url_for(pod_host or server_host(cmdline), port)
        socket_state = ARGV if root in snap.by_argv else ASSUMED if root in snap.assumed else ""
        target = _build(snap, root, tc.name, prefix, port, api_url, "config", socket_state, snap.others.get(root, 0))
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
        for root, port, url, socket_state in trusted(snap, roots, taken, ignored, local_addresses):
            name = f"vllm-{port}"
            if name in names:
                name = f"{name}-{root}"
            names.add(name)
            others = snap.others.get(root, 0)
            target = _build(snap, root, name, prefix, port, url, "autodiscover", socket_state, others)
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
    "DiscoveryResult",
    "discover",
    "is_api_server",
    "classify",
    "option_value",
    "read_pid_file",
]

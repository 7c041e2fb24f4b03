"""Signal, check and start processes — the only code that sends a signal or spawns a server.

Safety rule (docs/design.md, Remediation): a signal is sent only to a process whose identity
``(pid, starttime)`` still matches the snapshot it was taken from; a reused pid
is never touched. ``start`` launches an argv (never a shell) in a new session
(so the guardian owns the whole group), with env, cwd and an append-only log, opened through
``ServerFiles`` (never through a symbolic link the server's user could change; counted when refused).
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
import subprocess
from typing import TYPE_CHECKING, Iterator, Mapping, Protocol, Sequence

from vllm_guardian.errors import AccessDenied, TargetGone
from vllm_guardian.model import ProcKey
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.server_files import ServerFiles

LOG_SETTING = "restart.log_file"

if TYPE_CHECKING:
    from vllm_guardian.host.launch import LaunchSpec


class ProcessControl(Protocol):
    def alive(self, key: ProcKey) -> bool: ...
    def signal(self, key: ProcKey, sig: int) -> bool: ...
    def start(
        self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, log_file: str | None
    ) -> int: ...
    def start_spec(self, spec: LaunchSpec) -> int: ...
    def preflight(self, spec: LaunchSpec) -> list[str]: ...


class OsProcessControl:
    def __init__(self, procfs: ProcFS, files: ServerFiles | None = None) -> None:
        self.procfs = procfs
        self.files = files or ServerFiles()
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def alive(self, key: ProcKey) -> bool:
        try:
            st = self.procfs.stat(key.pid)
        except (TargetGone, AccessDenied):
            return False
        return st.starttime == key.starttime and st.state not in ("Z", "X")

    def signal(self, key: ProcKey, sig: int) -> bool:
        """Send ``sig`` iff the pid still is the snapshotted process. Returns True if sent.

        Where the kernel has pidfds, the process is pinned first (``pidfd_open``), its
        identity checked after that, and the signal sent through the pidfd: a pid reused
        between the check and the kill can never receive it."""
        if not self.alive(key):
            return False
        fd = _pidfd_open(key.pid)
        if fd is None:  # no pidfd here: the check-then-kill of older kernels
            try:
                os.kill(key.pid, sig)
            except ProcessLookupError:
                return False
        else:
            try:
                if not self.alive(key):
                    return False
                _signal.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                return False
            finally:
                os.close(fd)
        self._reap()
        return True

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, log_file: str | None) -> int:
        if not argv:
            raise ValueError("restart.command is empty")
        full_env = dict(os.environ)
        full_env.update(env or {})
        with self._log(log_file, None) as out:
            # the child keeps its own descriptor; ours is closed once it has started
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        self._reap()
        return proc.pid

    def preflight(self, spec: LaunchSpec) -> list[str]:
        """Why ``start_spec(spec)`` would fail on this host (``vllm_guardian.host.launch.preflight``)."""
        from vllm_guardian.host.launch import can_append, preflight

        return preflight(spec, can_append=lambda s: can_append(s, self._open_log))

    def start_spec(self, spec: LaunchSpec) -> int:
        """Launch exactly ``spec`` (``vllm_guardian.host.launch``): its environment and nothing of the
        guardian's, as its user and groups (needs CAP_SETUID/CAP_SETGID when they differ)."""
        if not spec.argv:
            raise ValueError("restart.command is empty")
        with self._log(spec.log_file, spec.log_owner) as out:
            # the child keeps its own descriptor; ours is closed once it has started
            proc = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(spec.env),
                cwd=spec.cwd,
                start_new_session=True,
                user=spec.uid,
                group=spec.gid,
                extra_groups=list(spec.groups) if spec.groups is not None else None,
            )
        self._children[proc.pid] = proc
        self._reap()
        return proc.pid

    def _open_log(self, path: str, owner: tuple[int, int | None] | None) -> int:
        return self.files.open_append(LOG_SETTING, path, owner)

    @contextlib.contextmanager
    def _log(self, path: str | None, owner: tuple[int, int | None] | None) -> Iterator[int]:
        """The server's stdout/stderr: its log file opened for ``owner`` (raises ``UnsafePath``,
        an ``OSError``, when refused), or /dev/null."""
        if not path:
            yield subprocess.DEVNULL
            return
        fd = self._open_log(path, owner)
        try:
            yield fd
        finally:
            os.close(fd)

    def _reap(self) -> None:
        """Collect exit statuses of servers we started (no zombies under the guardian)."""
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]


SIGTERM = _signal.SIGTERM
SIGKILL = _signal.SIGKILL


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid``; None where pidfds are unavailable (old kernel or Python) or refused."""
    if not hasattr(os, "pidfd_open") or not hasattr(_signal, "pidfd_send_signal"):
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None  # gone: the kill below reports it
    except OSError:
        return None

"""What ``restart.mode: command`` launches, decided before anything runs: argv, environment,
user and groups, working directory and log file — and whether that launch can work at all.

Pure apart from the seams it is handed (user/group databases, filesystem checks): no process is
started here (``ProcessControl.start_spec`` does that).

The environment is *clean*: only ``restart.env`` from the config, over a minimal base (``PATH``,
``LANG``, ``HOME``, and ``USER``/``LOGNAME`` when a user is set). Nothing of the guardian's own
environment is passed on: it holds the guardian's secrets (the Redis password, API keys read for
the canary, cloud credentials of the node), which a vLLM server — or a model's remote code
inside it — has no business seeing.

``restart.user`` / ``restart.group`` (a name or a numeric id) make the server run as that user:
its primary group unless ``group`` says otherwise, with the user's supplementary groups (e.g.
``video`` / ``render`` for the GPUs). Dropping to a user needs ``CAP_SETUID``/``CAP_SETGID``
(the systemd unit documents the drop-in that grants them).

``preflight`` says, before the old server is stopped, why this launch would fail: a log file
that cannot be opened for appending (a read-only path under the guardian's systemd sandbox is
the usual one; one the guardian refuses to open on the server's behalf, such as a symbolic link
the server's user put in its place: ``host.server_files.open_append``), a missing working
directory, a program not on the launch ``PATH``.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from vllm_guardian.host.server_files import open_append

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MINIMAL_LANG = "C.UTF-8"


class LaunchError(ValueError):
    """The configured launch cannot be built (unknown user or group, empty command)."""


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    log_file: str | None = None
    uid: int | None = None  # None: the guardian's own
    gid: int | None = None
    groups: tuple[int, ...] | None = None  # supplementary groups; None: keep the guardian's
    user: str | None = None  # for messages

    @property
    def log_owner(self) -> tuple[int, int | None] | None:
        """Who the log file is for: the launch's user and group (None: the guardian's own user)."""
        return None if self.uid is None else (self.uid, self.gid)

    def describe(self) -> str:
        """One line for logs and actions: the argv (redacted by the caller), who, where."""
        who = f" as {self.user} ({self.uid}:{self.gid})" if self.uid is not None else ""
        return f"{' '.join(self.argv)[:200]}{who}"


@dataclass(frozen=True)
class Accounts:
    """The user and group databases (``pwd``/``grp``), a seam for tests."""

    user_by_name: Callable[[str], Any] = pwd.getpwnam
    user_by_id: Callable[[int], Any] = pwd.getpwuid
    group_by_name: Callable[[str], Any] = grp.getgrnam
    group_by_id: Callable[[int], Any] = grp.getgrgid
    grouplist: Callable[[str, int], list[int]] = os.getgrouplist


def _user(ref: str, acc: Accounts) -> Any:
    try:
        return acc.user_by_id(int(ref)) if ref.isdigit() else acc.user_by_name(ref)
    except KeyError:
        raise LaunchError(f"restart.user: no user {ref!r} on this host") from None


def _group(ref: str, acc: Accounts) -> int:
    try:
        return int((acc.group_by_id(int(ref)) if ref.isdigit() else acc.group_by_name(ref)).gr_gid)
    except KeyError:
        raise LaunchError(f"restart.group: no group {ref!r} on this host") from None


def build_launch_spec(restart: Any, accounts: Accounts | None = None) -> LaunchSpec:
    """The launch of ``restart`` (a ``RestartConfig``): raises ``LaunchError`` when it cannot be built."""
    if not restart.command:
        raise LaunchError("restart.command is empty")
    acc = accounts or Accounts()
    user_ref = getattr(restart, "user", None)
    group_ref = getattr(restart, "group", None)
    env: dict[str, str] = {"PATH": MINIMAL_PATH, "LANG": MINIMAL_LANG, "HOME": "/"}
    uid = gid = None
    groups: tuple[int, ...] | None = None
    name = None
    if user_ref is not None:
        pw = _user(str(user_ref), acc)
        uid, gid, name = pw.pw_uid, pw.pw_gid, pw.pw_name
        env.update(HOME=pw.pw_dir or "/", USER=pw.pw_name, LOGNAME=pw.pw_name)
        groups = tuple(sorted(set(acc.grouplist(pw.pw_name, pw.pw_gid))))
    if group_ref is not None:
        gid = _group(str(group_ref), acc)
        if groups is None:
            groups = ()  # a group alone: drop the guardian's supplementary groups too
    env.update(restart.env or {})
    return LaunchSpec(
        tuple(restart.command), MappingProxyType(env), restart.cwd, restart.log_file, uid, gid, groups, name
    )


AppendOpener = Callable[[str, tuple[int, int | None] | None], int]  # (path, owner) -> fd


def can_append(spec: LaunchSpec, opener: AppendOpener = open_append) -> str:
    """ "" when the launch's log file opens for appending as ``start_spec`` opens it (created when
    absent, as ``host.server_files.open_append`` allows); else why not."""
    if not spec.log_file:
        return ""
    try:
        fd = opener(spec.log_file, spec.log_owner)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(fd)
    return ""


def preflight(
    spec: LaunchSpec,
    *,
    can_append: Callable[[LaunchSpec], str] = can_append,
    is_dir: Callable[[str], bool] = os.path.isdir,
    which: Callable[..., str | None] = shutil.which,
) -> list[str]:
    """Why this launch would fail, one line each; empty when it can run. Called before the running
    server is stopped, so a launch that cannot work never costs a server."""
    problems = []
    if spec.log_file:
        why = can_append(spec)
        if why:
            hint = (
                " (under the guardian's systemd unit only ReadWritePaths= are writable: add the "
                "log directory there, see deploy/systemd/guardian.service)"
                if "Read-only" in why
                else ""
            )
            problems.append(f"restart.log_file {spec.log_file}: cannot append: {why}{hint}")
    if spec.cwd and not is_dir(spec.cwd):
        problems.append(f"restart.cwd {spec.cwd}: not a directory")
    program = spec.argv[0]
    if "/" in program:
        if which(program) is None:
            problems.append(f"restart.command: {program} is not an executable file")
    elif which(program, path=spec.env.get("PATH", MINIMAL_PATH)) is None:
        problems.append(
            f"restart.command: {program} is not on the launch PATH "
            f"({spec.env.get('PATH', MINIMAL_PATH)}); give its full path or set restart.env.PATH"
        )
    return problems

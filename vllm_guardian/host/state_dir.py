"""The state dir must be the guardian's own: checked by ``guardian run`` before anything starts.

It holds what makes the guardian act or hold back: the maintenance switch, the restart budget and
each restart's progress, incidents and evidence, the alert spool, the embedded Redis. Whoever can
write there can switch remediation off for a year (``maintenance.json``) or forge a restart's
progress. ``check_state_dir`` raises ``CannotStart`` naming the path, its owner and mode unless:

- it is a directory owned by the guardian's effective user, not writable by group or others;
- it is reached through directories no one but root and that user can change: each one above it,
  up to ``/``, owned by one of them and not writable by group or others unless sticky with the
  next one theirs (``/tmp``) — what sshd's ``StrictModes`` asks of a home directory — and a
  symbolic link on the way only where it is just as fixed (``host.server_files.resolved``);
- nothing below it (the first ``MAX_ENTRIES``, links not followed) belongs to another user or is
  a file or folder writable by group or others (the control socket, 0660 for its group, is a
  socket and exempt).
"""

from __future__ import annotations

import os
import pwd
import stat

from vllm_guardian.errors import CannotStart
from vllm_guardian.host.server_files import UnsafePath, describe_mode, entry_fixed, resolved, trusted_uids

MAX_ENTRIES = 100_000  # entries below the state dir looked at (bundles are bounded by retention)


def owner_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def dir_problem(uid: int, mode: int, euid: int) -> str:
    """Why a state dir owned by ``uid`` with ``mode`` is not the guardian's own ("" when it is)."""
    if not stat.S_ISDIR(mode):
        return "is not a directory"
    if uid != euid:
        return f"is not owned by the guardian's user (uid {euid})"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others"
    return ""


def entry_problem(uid: int, mode: int, trusted: frozenset[int]) -> str:
    """Why an entry below the state dir could be changed by someone else ("" when it cannot)."""
    if uid not in trusted:
        return f"is owned by {owner_name(uid)}"
    if stat.S_ISLNK(mode) or stat.S_ISSOCK(mode):
        return ""  # a link's mode means nothing; the control socket is 0660 for its group on purpose
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(mode):04o})"
    return ""


def _fix(path: str, euid: int) -> str:
    return (
        "; the state dir holds the maintenance switch, restart budget and incidents, so it must be the "
        f"guardian's own (e.g. chown -R {euid} {path} && chmod 0750 {path}, and remove what another user left there)"
    )


def check_state_dir(path: str, *, euid: int | None = None, max_entries: int = MAX_ENTRIES) -> None:
    """Raise ``CannotStart`` unless ``path`` (an existing directory) is the guardian's own, as above."""
    euid = os.geteuid() if euid is None else euid
    trusted = trusted_uids(euid)
    where = os.path.abspath(path)
    try:
        with resolved(where, trusted) as place:
            st = place.entry
            if st is None:
                raise CannotStart(f"state_dir {path}: no such directory")
            why = dir_problem(st.st_uid, st.st_mode, euid)
            if why:
                raise CannotStart(
                    f"state_dir {path} (owner {owner_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}) {why}"
                    + _fix(path, euid)
                )
            if not place.fixed:
                loose = place.loose
            elif not entry_fixed(True, place.dir_st.st_uid, place.dir_st.st_mode, st.st_uid, trusted):
                loose = f"{place.dir_path} ({describe_mode(place.dir_st.st_uid, place.dir_st.st_mode)})"
            else:
                loose = ""
            if loose:
                raise CannotStart(
                    f"state_dir {path}: the directory {loose} above it lets a user other than root or "
                    f"uid {euid} replace what is below it; make every directory above the state dir "
                    "writable by its owner (root) only, or sticky (as /tmp)"
                )
    except UnsafePath as e:
        raise CannotStart(f"state_dir {path}: {e.strerror}" + _fix(path, euid)) from None
    except OSError as e:
        raise CannotStart(f"state_dir {path}: {e.strerror or e}") from None
    _check_entries(where, path, euid, trusted, max_entries)


def _check_entries(where: str, path: str, euid: int, trusted: frozenset[int], max_entries: int) -> None:
    seen = 0
    for dirpath, dirnames, filenames, dirfd in os.fwalk(where, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            seen += 1
            if seen > max_entries:
                return
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            why = entry_problem(st.st_uid, st.st_mode, trusted)
            if why:
                raise CannotStart(f"state_dir {path}: {os.path.join(dirpath, name)} {why}" + _fix(path, euid))

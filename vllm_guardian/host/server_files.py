"""Files the guardian opens on a server's behalf: the launched server's log (``restart.log_file``,
appended to), a log read for crash forensics (``log_path`` or ``restart.log_file``), a
``match.pid_file`` and an ``api_key_file``.

The guardian runs as root; such a file usually lives where the server's user writes, so that
user decides what its path names: a symbolic link to ``/etc/shadow`` in the log's place would
have root append the server's output to it, or read it into an evidence bundle. The rule
(docs/design.md, "Files opened on a server's behalf"): a path is followed only through what
nobody but root and the guardian's own user can change.

Decides (pure, on ``stat`` values): who can change a directory's entries (``holds``) — its
owner when that is not a trusted user; anyone who may write it, unless it is sticky (then an
entry a trusted user owns stays put). A symbolic link is followed only where it, and every
directory above it, are held so (``/var/run`` -> ``/run``, a Kubernetes Secret's ``..data``);
anywhere else in the path it is refused. The file itself must be a regular file (a FIFO or
a device is refused before any read: opened non-blocking), with a single link unless its
directory is held by trusted users alone (a hard link to a root-only file is another name of
it), and — when written — owned by root, the guardian's user or the server's user; a log it
creates is handed to the server's user (where the guardian may chown).

Reads: the path one component at a time from ``/`` (``O_PATH`` directory fds, an ``lstat`` of
each name, the opened directory checked to be the one stat'ed), so the kernel resolves no
name behind the check. Sizes are the caller's: ``read_head`` and ``read_tail`` read at most
``max_bytes``. ``ServerFiles`` counts refusals per setting and logs each path's first.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping

MAX_LINKS = 40  # symbolic links followed in one path (the kernel's own limit)
SAID_MAX = 256  # (setting, path) pairs whose refusal was logged; later ones at debug level
LOG_MODE = 0o640  # a log file the guardian creates

HOLDS_ALL = "all"  # only trusted users can change its entries
HOLDS_OWN = "own"  # sticky and writable by others: entries of trusted users stay put
HOLDS_NONE = "none"  # someone else can change any entry

Opener = Callable[[str], int]


class UnsafePath(OSError):
    """A path the guardian refuses to open on a server's behalf; ``strerror`` says why."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EPERM, why, path)

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


# ---------------------------------------------------------------- pure
def trusted_uids(euid: int | None = None) -> frozenset[int]:
    """Root and the guardian's own user."""
    return frozenset({0, os.geteuid() if euid is None else euid})


def holds(uid: int, mode: int, trusted: frozenset[int]) -> str:
    """Who can change the entries of a directory owned by ``uid`` with ``mode``: ``HOLDS_ALL``
    (trusted users only), ``HOLDS_OWN`` (sticky: others may add entries, not move a trusted
    user's) or ``HOLDS_NONE``."""
    if uid not in trusted:
        return HOLDS_NONE
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return HOLDS_OWN if mode & stat.S_ISVTX else HOLDS_NONE
    return HOLDS_ALL


def entry_fixed(dir_fixed: bool, dir_uid: int, dir_mode: int, entry_uid: int, trusted: frozenset[int]) -> bool:
    """Whether an entry owned by ``entry_uid`` stays what it is: its directory is reached through
    fixed entries only and lets no one else replace it."""
    if not dir_fixed:
        return False
    held = holds(dir_uid, dir_mode, trusted)
    return held == HOLDS_ALL or (held == HOLDS_OWN and entry_uid in trusted)


def describe_mode(uid: int, mode: int) -> str:
    return f"owner uid {uid}, mode {stat.S_IMODE(mode):04o}"


# ---------------------------------------------------------------- the walk
@dataclass(frozen=True)
class _Dir:
    fd: int  # O_PATH
    st: os.stat_result
    fixed: bool  # reached through entries no one but trusted users can change
    where: str  # its path, as walked (links resolved)
    loose: str  # the first directory on the way whose entries someone else can change ("": none)


@dataclass(frozen=True)
class Place:
    """Where a path's last name lives: its directory (an ``O_PATH`` fd), whether that directory is
    reached through fixed entries (``fixed``; ``loose`` names the first directory on the way that
    is not held by trusted users), its stat, and the name's ``lstat`` (None: absent)."""

    path: str
    dir_fd: int
    dir_st: os.stat_result
    fixed: bool
    name: str
    entry: os.stat_result | None
    trusted: frozenset[int]
    dir_path: str = "/"
    loose: str = ""

    @property
    def held_by_trusted(self) -> bool:
        """Nobody but trusted users can have put an entry here."""
        return self.fixed and holds(self.dir_st.st_uid, self.dir_st.st_mode, self.trusted) == HOLDS_ALL


_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _join(where: str, name: str) -> str:
    return where.rstrip("/") + "/" + name


@contextmanager
def resolved(path: str, trusted: frozenset[int] | None = None) -> Iterator[Place]:
    """The ``Place`` of ``path``'s last name, reached one component at a time; raises
    ``UnsafePath`` for a symbolic link that someone else could change, ``OSError`` for a missing
    or non-directory component. The fds are closed when the block ends."""
    trusted = trusted if trusted is not None else trusted_uids()
    if not os.path.isabs(path):  # relative to the guardian's own working directory
        path = os.path.join(os.getcwd(), path)
    fds: list[int] = []

    def at_root() -> _Dir:
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(fd)
        return _Dir(fd, os.fstat(fd), True, "/", "")

    try:
        here, stack = at_root(), list[_Dir]()
        parts = [p for p in path.split("/") if p not in ("", ".")]
        links = 0
        while parts:
            name = parts.pop(0)
            if name == "..":
                if stack:
                    here = stack.pop()
                continue
            try:
                est: os.stat_result | None = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            except FileNotFoundError:
                if parts:
                    raise
                est = None
            st = here.st
            if est is not None and stat.S_ISLNK(est.st_mode):
                what = "a symbolic link" if not parts else f"its component {name!r} is a symbolic link"
                if not (entry_fixed(here.fixed, st.st_uid, st.st_mode, est.st_uid, trusted) and est.st_uid in trusted):
                    raise UnsafePath(
                        path,
                        f"{what} (owner uid {est.st_uid}, in {here.where}: {describe_mode(st.st_uid, st.st_mode)}) "
                        "that a user other than root or the guardian's can change: not followed",
                    )
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePath(path, f"more than {MAX_LINKS} symbolic links")
                target = os.readlink(name, dir_fd=here.fd)
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                if target.startswith("/"):
                    here, stack = at_root(), list[_Dir]()
                if not parts:
                    raise UnsafePath(path, "names a directory, not a file")
                continue
            if not parts:
                yield Place(path, here.fd, st, here.fixed, name, est, trusted, here.where, here.loose)
                return
            assert est is not None
            if not stat.S_ISDIR(est.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, f"{name!r} is not a directory", path)
            nfd = os.open(name, _DIR_FLAGS, dir_fd=here.fd)
            fds.append(nfd)
            nst = os.fstat(nfd)
            if (nst.st_dev, nst.st_ino) != (est.st_dev, est.st_ino):
                raise UnsafePath(path, f"its component {name!r} changed while it was read")
            fixed = entry_fixed(here.fixed, st.st_uid, st.st_mode, nst.st_uid, trusted)
            loose = here.loose or ("" if fixed else f"{here.where} ({describe_mode(st.st_uid, st.st_mode)})")
            stack.append(here)
            here = _Dir(nfd, nst, fixed, _join(here.where, name), loose)
        raise UnsafePath(path, "names a directory, not a file")
    finally:
        for f in fds:
            os.close(f)


def _regular(place: Place) -> None:
    """Refuse a FIFO, device or socket before it is opened (an open may block or act)."""
    if place.entry is not None and not stat.S_ISREG(place.entry.st_mode):
        raise UnsafePath(place.path, "not a regular file")


def _check_file(fd: int, place: Place) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(place.path, "not a regular file")
    if st.st_nlink > 1 and not place.held_by_trusted:
        raise UnsafePath(
            place.path,
            f"has {st.st_nlink} hard links in a directory others can write "
            "(it may be another name of someone else's file)",
        )
    return st


def _opened(place: Place, flags: int, mode: int = 0) -> int:
    try:
        return os.open(place.name, flags | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC, mode, dir_fd=place.dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:  # swapped for a link after the lstat
            raise UnsafePath(place.path, "became a symbolic link while it was opened") from None
        raise


# ---------------------------------------------------------------- opening
def open_read(path: str, *, trusted: frozenset[int] | None = None) -> int:
    """A read-only fd of ``path`` (a regular file, reached through fixed links only); raises
    ``UnsafePath`` or the ``OSError`` of the open (``FileNotFoundError``...)."""
    with resolved(path, trusted) as place:
        if place.entry is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        _regular(place)
        fd = _opened(place, os.O_RDONLY | os.O_NONBLOCK)
        try:
            _check_file(fd, place)
        except BaseException:
            os.close(fd)
            raise
    return fd


def open_append(
    path: str, owner: tuple[int, int | None] | None = None, *, trusted: frozenset[int] | None = None
) -> int:
    """An append-only fd of ``path`` for a server run as ``owner`` (uid, gid; None: the guardian's
    own user): created (mode 0640, handed to ``owner``) when absent; an existing one must be a
    regular file owned by root, the guardian's user or ``owner``. Raises ``UnsafePath`` or the
    ``OSError`` of the open."""
    trusted = trusted if trusted is not None else trusted_uids()
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
    with resolved(path, trusted) as place:
        _regular(place)
        created = False
        if place.entry is None:
            try:
                fd = _opened(place, flags | os.O_CREAT | os.O_EXCL, LOG_MODE)
                created = True
            except FileExistsError:  # made between the lstat and the open: checked like any other
                fd = _opened(place, flags)
        else:
            fd = _opened(place, flags)
        try:
            st = _check_file(fd, place)
            allowed = trusted | ({owner[0]} if owner is not None else set())
            if st.st_uid not in allowed:
                raise UnsafePath(
                    path, f"owned by uid {st.st_uid}, neither root, the guardian's user nor the server's user"
                )
            if created and owner is not None:
                _hand_over(fd, owner)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
    return fd


def _hand_over(fd: int, owner: tuple[int, int | None]) -> None:
    """A log the guardian created goes to the server's user; without CAP_CHOWN (the shipped systemd
    unit grants none) it stays the guardian's, written through the descriptor the server inherits."""
    try:
        os.fchown(fd, owner[0], -1 if owner[1] is None else owner[1])
    except PermissionError:
        pass


def read_head(path: str, max_bytes: int, *, opener: Opener = open_read) -> bytes:
    """At most the first ``max_bytes`` of ``path``."""
    fd = opener(path)
    try:
        return os.read(fd, max_bytes)
    finally:
        os.close(fd)


def read_tail(path: str, max_bytes: int, *, opener: Opener = open_read) -> tuple[bytes, int]:
    """At most the last ``max_bytes`` of ``path`` and the offset they start at."""
    fd = opener(path)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        return os.pread(fd, max_bytes, start), start
    finally:
        os.close(fd)


# ---------------------------------------------------------------- counted
@dataclass(frozen=True)
class ServerFilesStatus:
    """The status's ``server_files`` section: refusals since start, per setting, and the last one."""

    refused: Mapping[str, int] = field(default_factory=dict)  # setting (e.g. restart.log_file) -> count
    last_refusal: str = ""


class ServerFiles:
    """The guardian's opener of files on a server's behalf: the functions above, with each refusal
    counted under its setting and logged once per (setting, path). Used from the loop thread, the
    discovery worker and the diagnosis workers."""

    def __init__(self, log: logging.Logger | None = None, *, trusted: frozenset[int] | None = None) -> None:
        self.log = log or logging.getLogger("guardian.files")
        self.trusted = trusted
        self._refused: dict[str, int] = {}
        self._last = ""
        self._said: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def reader(self, setting: str) -> Opener:
        """``open_read`` for ``setting``, counted."""

        def opener(path: str) -> int:
            return self._counted(setting, path, lambda: open_read(path, trusted=self.trusted))

        return opener

    def open_append(self, setting: str, path: str, owner: tuple[int, int | None] | None) -> int:
        return self._counted(setting, path, lambda: open_append(path, owner, trusted=self.trusted))

    def _counted(self, setting: str, path: str, open_it: Callable[[], int]) -> int:
        try:
            return open_it()
        except UnsafePath as e:
            self.refuse(setting, e)
            raise

    def refuse(self, setting: str, e: UnsafePath) -> None:
        with self._lock:
            self._refused[setting] = self._refused.get(setting, 0) + 1
            self._last = f"{setting} {e}"
            first = (setting, str(e.filename)) not in self._said and len(self._said) < SAID_MAX
            if first:
                self._said.add((setting, str(e.filename)))
        (self.log.warning if first else self.log.debug)("%s refused: %s", setting, e)

    def status_section(self) -> ServerFilesStatus:
        with self._lock:
            return ServerFilesStatus(dict(self._refused), self._last)

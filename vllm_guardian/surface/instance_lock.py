"""One guardian per state dir: an exclusive ``flock`` on ``<state_dir>/guardian.lock``.

Taken before anything else starts (the embedded Redis, the control socket), so a second
``guardian run`` on the same state dir stops at once and touches nothing of the first one's.
The lock is the kernel's: it goes with the process, even one killed with SIGKILL, so a
crashed guardian never blocks its successor. The file holds the owner's pid, for the message.
"""

from __future__ import annotations

import fcntl
import os

from vllm_guardian.errors import CannotStart

LOCK_NAME = "guardian.lock"


class InstanceLock:
    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self) -> InstanceLock:
        """Take the lock or raise ``CannotStart (a GuardianError)`` naming the guardian that holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise CannotStart(
                f"another guardian (pid {holder}) already runs on state_dir "
                f"{os.path.dirname(self.path)}; not starting anything"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> InstanceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

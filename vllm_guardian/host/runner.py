"""Run an argv (never a shell) with a timeout and an output cap: py-spy, npu-smi, hooks, systemctl.

The seam every external command goes through. ``CommandResult`` carries what a
caller needs to decide and to record: exit code, capped output, duration and
whether it was killed for running past its timeout (then the whole process
group is killed, so a wedged child cannot linger).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from vllm_guardian.errors import BackendUnavailable

DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed on timeout
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class CommandRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        max_output: int = DEFAULT_MAX_OUTPUT,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult: ...


class SubprocessRunner:
    """The real runner: a new session per command so a timeout kills its whole group."""

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        max_output: int = DEFAULT_MAX_OUTPUT,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        if not argv:
            raise ValueError("empty argv")
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except FileNotFoundError as e:
            raise BackendUnavailable(f"{argv[0]}: not found ({e.strerror})") from None
        except PermissionError as e:
            raise BackendUnavailable(f"{argv[0]}: not executable ({e.strerror})") from None
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        truncated = len(out) > max_output or len(err) > max_output
        return CommandResult(
            argv,
            None if timed_out else proc.returncode,
            out[:max_output],
            err[:max_output],
            time.monotonic() - start,
            timed_out,
            truncated,
        )

"""Domain errors. Constructors raise these; only the CLI turns them into exit codes."""

from __future__ import annotations


class GuardianError(Exception):
    """Base of every error the guardian raises on purpose."""


class TargetGone(GuardianError):
    """The process (or thread) vanished, or its pid now belongs to another process."""


class AccessDenied(GuardianError):
    """The kernel refused a read (ptrace checks: needs root or CAP_SYS_PTRACE)."""


class ProbeFailed(GuardianError):
    """A probe could not produce its samples this round (timeout, bad payload, refused)."""


class BackendUnavailable(GuardianError):
    """An optional backend (NVML, npu-smi, py-spy, Redis) is absent or unusable here."""


class ConfigError(GuardianError):
    """The configuration is invalid. ``problems`` lists ``"key.path: what is wrong"`` lines."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class CannotStart(GuardianError):
    """The daemon cannot start here as configured: its HTTP port is taken, another guardian holds the
    state dir. The message says what, where and what to do; the CLI exits 3."""


class UnknownTarget(GuardianError, KeyError):
    """A command named a target this guardian does not supervise (a KeyError too, for old callers)."""

    def __str__(self) -> str:  # KeyError's str() quotes its message; this one reads as a sentence
        return str(self.args[0]) if self.args else "unknown target"


class CatalogError(GuardianError):
    """A catalog file (known bugs, device faults) is not valid; the message lists every problem."""

"""The config's typed status section: reloads since start and the last one's outcome (``config``
in ``guardian status --json``). The runtime records each reload (``loop/runtime.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload did: applied (``ok``) or refused, in words."""

    at: float  # wall
    ok: bool
    message: str
    needs_restart: tuple[str, ...] = ()  # changed sections kept until the guardian restarts


@dataclass(frozen=True)
class ConfigStatus:
    """The status's ``config`` section: reloads since start and the last one's outcome."""

    reloads: int = 0
    last_reload: ReloadOutcome | None = None


class ReloadBook:
    """Keeps the reload count and the last outcome for status (the runtime records each reload)."""

    def __init__(self) -> None:
        self.current = ConfigStatus()

    def record(self, outcome: ReloadOutcome) -> None:
        self.current = ConfigStatus(self.current.reloads + 1, outcome)

    def status_section(self) -> ConfigStatus:
        return self.current

"""Remediation policy (docs/design.md, Safety gates): may this target be restarted now? Pure decisions over state.

Budgets (restarts per period, persisted so a guardian restart does not reset
them), exponential backoff between restarts, maintenance mode, the node-wide
anomaly check. The fleet lease lives in ``vllm_guardian.remediation.lease`` (it needs Redis).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from vllm_guardian.config.schema import PolicyConfig
from vllm_guardian.fsutil import atomic_write


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str
    retry_after: float | None = None  # wall seconds until it may be allowed (backoff)
    exhausted: bool = False


class RestartLedger:
    """Wall times of restarts per target, in ``<state_dir>/restarts.json`` (fsync'd, atomic).

    Restarts older than ``keep`` seconds (the budget period: older ones count for nothing) are
    pruned whenever one is recorded, so the file stays small."""

    def __init__(self, state_dir: str, keep: float | None = None) -> None:
        self.path = Path(state_dir) / "restarts.json"
        self.keep = keep
        self.restarts: dict[str, list[float]] = {}
        self.unreadable: str | None = None  # set: every restart is refused (fail closed) until fixed
        try:
            data = json.loads(self.path.read_text())
            self.restarts = {str(k): [float(x) for x in v] for k, v in data.items()}
        except FileNotFoundError:
            self.restarts = {}
        except (OSError, ValueError, AttributeError, TypeError, RecursionError) as e:
            self.restarts = {}
            self.unreadable = f"restart ledger {self.path} is unreadable ({type(e).__name__}: {e})"
            logging.getLogger(__name__).error(
                "%s: refusing every restart until it is repaired or removed (the budget cannot be known)",
                self.unreadable,
            )

    def record(self, target: str, at: float) -> None:
        if self.keep is not None:
            self.prune(at, self.keep)
        self.restarts.setdefault(target, []).append(at)
        self._save()

    def recent(self, target: str, now: float, period: float) -> list[float]:
        return [t for t in self.restarts.get(target, []) if now - t < period]

    def prune(self, now: float, keep: float) -> None:
        for k in list(self.restarts):
            self.restarts[k] = [t for t in self.restarts[k] if now - t < keep]
            if not self.restarts[k]:
                del self.restarts[k]

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(self.restarts))


def backoff_seconds(cfg: PolicyConfig, restarts_in_period: int) -> float:
    """0 before the first restart, then initial, 2×initial, 4×… capped at max."""
    if restarts_in_period <= 0:
        return 0.0
    return float(min(cfg.backoff.max, cfg.backoff.initial * 2 ** (restarts_in_period - 1)))


def may_restart(cfg: PolicyConfig, ledger: RestartLedger, target: str, now_wall: float) -> Verdict:
    if ledger.unreadable:
        return Verdict(False, f"{ledger.unreadable}; restarts refused until it is repaired or removed")
    recent = ledger.recent(target, now_wall, cfg.budget.period)
    if len(recent) >= cfg.budget.max_restarts:
        return Verdict(
            False,
            f"restart budget exhausted: {len(recent)} restarts in the last "
            f"{cfg.budget.period:.0f}s (max {cfg.budget.max_restarts})",
            exhausted=True,
        )
    wait = backoff_seconds(cfg, len(recent))
    if recent and now_wall - max(recent) < wait:
        left = wait - (now_wall - max(recent))
        return Verdict(False, f"backoff: {left:.0f}s left of {wait:.0f}s after the last restart", retry_after=left)
    return Verdict(True, "within budget")


def budget_left(cfg: PolicyConfig, ledger: RestartLedger, target: str, now_wall: float) -> int:
    return max(0, cfg.budget.max_restarts - len(ledger.recent(target, now_wall, cfg.budget.period)))


def node_anomaly(cfg: PolicyConfig, tripped: int, total: int) -> str | None:
    """Most targets of the node tripping at once points at the node (driver, device, host)."""
    if (
        total >= cfg.node_anomaly.min_targets
        and tripped / max(total, 1) >= cfg.node_anomaly.fraction
        and tripped >= cfg.node_anomaly.min_targets
    ):
        return (
            f"node-wide anomaly: {tripped} of {total} targets tripped at once; suspect the node "
            f"(driver, device, host), escalating instead of restarting"
        )
    return None


class Maintenance:
    """``<state_dir>/maintenance.json`` = {"until": wall}; remediation pauses while it holds."""

    def __init__(self, state_dir: str) -> None:
        self.path = Path(state_dir) / "maintenance.json"

    def until(self) -> float | None:
        try:
            return float(json.loads(self.path.read_text())["until"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def active(self, now_wall: float) -> bool:
        u = self.until()
        return u is not None and now_wall < u

    def turn_on(self, now_wall: float, duration: float) -> float:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        until = now_wall + duration
        atomic_write(self.path, json.dumps({"until": until, "since": now_wall}))
        return until

    def turn_off(self) -> bool:
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

"""Per-code device-fault rules (docs/policy.md, Device-fault rules): how bad a code is, how many
times within a window before it counts, and the action — ``annotate``, ``alert``,
``refuse_restart`` or ``taint`` (taint only with ``kubernetes.taint_on_device_fault``). Defaults come
from the device catalog; ``policy.device_fault_rules`` overrides them per code (an exact code wins
over its ``<prefix>:*`` family). Pure: catalog entry, rules and occurrence times in, a decision out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from vllm_guardian.config.schema_policy import DeviceFaultRule
from vllm_guardian.detectors.device_catalog import FaultEntry


@dataclass(frozen=True)
class FaultDecision:
    code: str
    severity: str
    action: str  # annotate | alert | refuse_restart | taint | none (not counted yet)
    counted: bool
    source: str  # "catalog" or "config"


def default_action(entry: FaultEntry) -> str:
    """The catalog's default: a critical fault a restart cannot help refuses the restart; another
    critical one alerts; warnings and info annotate."""
    if entry.blocks_restart:
        return "refuse_restart"
    return "alert" if entry.severity == "critical" else "annotate"


def rule_for(code: str, rules: tuple[DeviceFaultRule, ...]) -> DeviceFaultRule | None:
    exact = [r for r in rules if r.code == code]
    if exact:
        return exact[0]
    prefix = code.split(":", 1)[0] + ":*"
    family = [r for r in rules if r.code == prefix]
    return family[0] if family else None


def decide(
    entry: FaultEntry,
    rules: tuple[DeviceFaultRule, ...],
    *,
    code: str,
    seen_at: list[float],
    now: float,
    taint_allowed: bool,
) -> FaultDecision:
    """The rule for ``code`` applied to its occurrences ``seen_at`` (wall seconds)."""
    rule = rule_for(code, rules)
    if rule is None:
        return FaultDecision(code, entry.severity, default_action(entry), bool(seen_at), "catalog")
    severity = rule.severity or entry.severity
    action = rule.action or default_action(replace(entry, severity=severity, rule=""))  # of the new severity
    if action == "taint" and not taint_allowed:
        action = "refuse_restart"
    within = [t for t in seen_at if 0 <= now - t <= rule.window]
    counted = len(within) >= rule.count
    return FaultDecision(code, severity, action if counted else "none", counted, "config")


def ruled_entry(entry: FaultEntry, decision: FaultDecision) -> FaultEntry:
    """The catalog entry as a configured rule leaves it (the catalog's own when no rule governs):
    not counted yet → ``info`` (shown, opens nothing, blocks nothing); ``annotate`` → a warning at
    most, never blocks; ``alert`` → the rule's severity, never blocks; ``refuse_restart`` and
    ``taint`` → the rule's severity, blocks the restart (``blocks_restart`` reads ``rule``)."""
    if decision.source != "config":
        return entry
    if decision.action == "none":
        return replace(entry, severity="info", rule="none")
    severity = decision.severity
    if decision.action == "annotate" and severity == "critical":
        severity = "warning"
    return replace(entry, severity=severity, rule=decision.action)


def judge(
    rules: tuple[DeviceFaultRule, ...], taint_allowed: bool
) -> Callable[[str, FaultEntry, list[float], float], FaultEntry] | None:
    """The fault ledger's judge for ``rules`` (None without rules: the catalog's entries as they are)."""
    if not rules:
        return None

    def entry_for(code: str, entry: FaultEntry, seen_at: list[float], now: float) -> FaultEntry:
        return ruled_entry(
            entry, decide(entry, rules, code=code, seen_at=seen_at, now=now, taint_allowed=taint_allowed)
        )

    return entry_for


def describe(rules: tuple[DeviceFaultRule, ...]) -> list[str]:
    """One line per configured rule for ``guardian check-config``."""
    return [
        f"{r.code}: severity {r.severity or 'catalog'}, {r.count} within {r.window:g}s, "
        f"action {r.action or 'catalog default'}"
        for r in rules
    ]

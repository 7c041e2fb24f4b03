"""Which profile a target gets (docs/policy.md, Profiles): the first rule of ``policy.profiles`` whose
every key matches the target's facts; none matching → the built-in ``default`` (the global policy).
Pure: facts in, a resolved profile out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vllm_guardian.config.schema import PolicyConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.config.schema_policy import BreakerConfig, ProfileConfig, ProfileMatch, RecurrenceConfig

DEFAULT_NAME = "default"


@dataclass(frozen=True)
class TargetFacts:
    """What a profile can match on, as the guardian knows it for one target."""

    node: str
    target: str
    model: str | None = None
    device_kind: str = "none"
    group: str | None = None
    node_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedProfile:
    """A profile with the global policy filled in where it left a key unset."""

    name: str
    modes: dict[str, Mode]
    dry_run: bool
    max_restarts: int
    budget_period: float
    breaker: BreakerConfig
    recurrence: RecurrenceConfig

    def mode_for(self, kind: str, detector_mode: Mode) -> Mode:
        """The profile's mode for ``kind`` (``*`` for any), else the detector's own."""
        return self.modes.get(kind, self.modes.get("*", detector_mode))


def _full(pattern: str | None, value: str | None) -> bool:
    if pattern is None:
        return True
    return value is not None and re.fullmatch(pattern, value) is not None


def matches(rule: ProfileMatch, facts: TargetFacts) -> bool:
    """Every key the rule sets matches the facts (a key left out matches anything)."""
    if rule.device_kind is not None and rule.device_kind != facts.device_kind:
        return False
    if any(facts.node_labels.get(k) != v for k, v in rule.node_labels.items()):
        return False
    return (
        _full(rule.node, facts.node)
        and _full(rule.model, facts.model)
        and _full(rule.target, facts.target)
        and _full(rule.group, facts.group)
    )


def resolve(policy: PolicyConfig, profile: ProfileConfig | None) -> ResolvedProfile:
    if profile is None:
        return ResolvedProfile(
            name=DEFAULT_NAME,
            modes={},
            dry_run=policy.dry_run,
            max_restarts=policy.budget.max_restarts,
            budget_period=policy.budget.period,
            breaker=policy.breaker,
            recurrence=policy.recurrence,
        )
    return ResolvedProfile(
        name=profile.name,
        modes=dict(profile.modes),
        dry_run=policy.dry_run if profile.dry_run is None else profile.dry_run,
        max_restarts=policy.budget.max_restarts if profile.max_restarts is None else profile.max_restarts,
        budget_period=policy.budget.period if profile.budget_period is None else profile.budget_period,
        breaker=policy.breaker if profile.breaker is None else profile.breaker,
        recurrence=policy.recurrence if profile.recurrence is None else profile.recurrence,
    )


def select(policy: PolicyConfig, facts: TargetFacts) -> ResolvedProfile:
    """The first profile whose match holds, resolved over the global policy; none → ``default``."""
    for profile in policy.profiles:
        if matches(profile.match, facts):
            return resolve(policy, profile)
    return resolve(policy, None)


def describe(policy: PolicyConfig, facts: list[TargetFacts]) -> list[str]:
    """One line per target for ``guardian check-config``: which profile it gets and what it sets."""
    lines = []
    for f in facts:
        p = select(policy, f)
        modes = ", ".join(f"{k}={v.value}" for k, v in sorted(p.modes.items())) or "detector modes"
        lines.append(
            f"{f.target}: profile {p.name} ({modes}; dry_run={str(p.dry_run).lower()}; "
            f"budget {p.max_restarts}/{p.budget_period:g}s)"
        )
    return lines

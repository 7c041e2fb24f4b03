"""The policy one target is remediated under (docs/policy.md, Profiles): the profile its facts select
(``policy/profiles.py``), the global policy with that profile's dry-run and budget put in (what the
gates and the budget read), and the scope its restarts count in for the percentage breaker.
Pure: the global policy and the target's facts in, a ``TargetPolicy`` out.

A fact the guardian does not know counts as unknown, never as a match: a target whose model is not
known yet is counted alone by a ``model`` breaker (``target:<name>``), as one in no group is by a
``group`` breaker. The group is the data-parallel group the server's own flags name (``target_group``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vllm_guardian.config.schema import BudgetConfig, PolicyConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.groups.identity import DP, from_argv
from vllm_guardian.model import Target
from vllm_guardian.policy.profiles import ResolvedProfile, TargetFacts, select


@dataclass(frozen=True)
class TargetPolicy:
    profile: ResolvedProfile
    policy: PolicyConfig  # the global policy with the profile's dry_run and budget
    scope: str  # the breaker's scope key: model:<m>, group:<g>, profile:<p>, or target:<name> (counted alone)

    @property
    def breaker_on(self) -> bool:
        return self.profile.breaker.enabled

    def mode_for(self, kind: str, detector_mode: Mode) -> Mode:
        return self.profile.mode_for(kind, detector_mode)


def scope_key(profile: ResolvedProfile, facts: TargetFacts) -> str:
    scope = profile.breaker.scope
    value = {"model": facts.model, "group": facts.group, "profile": profile.name}.get(scope)
    return f"{scope}:{value}" if value else f"target:{facts.target}"


def target_policy(policy: PolicyConfig, facts: TargetFacts) -> TargetPolicy:
    profile = select(policy, facts)
    own = dataclasses.replace(
        policy,
        dry_run=profile.dry_run,
        budget=BudgetConfig(max_restarts=profile.max_restarts, period=profile.budget_period),
    )
    return TargetPolicy(profile, own, scope_key(profile, facts))


def device_kind(backends: list[str]) -> str:
    """``nvidia``, ``ascend`` or ``none`` from the backends that read the target's devices."""
    if any(b == "nvml" for b in backends):
        return "nvidia"
    if any(b == "npu_smi" for b in backends):
        return "ascend"
    return "none"


def target_group(target: Target) -> str | None:
    """The data-parallel group its API server's flags name (``dp@<address>:<rpc port>``, as every
    member derives it: ``groups/identity.py``); None for a server in no group, a Ray or
    LeaderWorkerSet one (their group is not read from the flags), or flags that do not parse."""
    api = target.api_server
    ident = from_argv(api.cmdline) if api is not None else None
    if ident is None or ident.kind != DP or ident.problems or not ident.group:
        return None
    return ident.group

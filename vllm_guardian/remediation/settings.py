"""What remediation is configured with: the node, where state lives, the policy, and per configured
target its restart and drain (``RestartSpec``). An autodiscovered target has none: it is never
restarted; ``restart_config_for`` answers the defaults for it, so no caller needs a fallback."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from vllm_guardian.policy.profiles import TargetFacts

from vllm_guardian.config.schema import Config, DrainConfig, PolicyConfig, RestartConfig, TargetConfig

DEFAULT_RESTART = RestartConfig()
NO_DRAIN = DrainConfig(timeout=0.0)


@dataclass(frozen=True)
class RestartSpec:
    """What remediation needs to know about one configured target."""

    restart: RestartConfig = field(default_factory=RestartConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    systemd_unit: str | None = None  # the matched unit, when restart.unit is not set
    model: str | None = None  # the served model as configured (profiles and the breaker match on it)

    @classmethod
    def of(cls, tc: TargetConfig) -> RestartSpec:
        return cls(tc.restart, tc.drain, tc.match.systemd_unit, tc.model)


@dataclass(frozen=True)
class RemediationSettings:
    node: str | None  # as configured (control messages carry it)
    state_dir: str
    policy: PolicyConfig
    targets: Mapping[str, RestartSpec] = field(default_factory=dict)
    pod_removal: str = "evict"  # restart.mode kubernetes: evict | delete (kubernetes.pod_removal)
    recovery_grace: float = 30.0  # lifecycle.recovery_grace: past vLLM's own round timeout, judged
    systemd_dropin_root: str = "/run/systemd/system"  # where a workaround's unit drop-in is written
    node_labels: Mapping[str, str] = field(default_factory=dict)  # node_labels: what profiles match on

    @classmethod
    def from_config(cls, cfg: Config) -> RemediationSettings:
        return cls(
            cfg.node or os.uname().nodename,
            cfg.state_dir,
            cfg.policy,
            {t.name: RestartSpec.of(t) for t in cfg.targets},
            cfg.kubernetes.pod_removal,
            cfg.lifecycle.recovery_grace,
            node_labels=dict(cfg.node_labels),
        )

    def configured(self, target: str) -> bool:
        return target in self.targets

    def restart_config_for(self, target: str) -> RestartConfig:
        """The target's restart config; the defaults for an autodiscovered one."""
        spec = self.targets.get(target)
        return DEFAULT_RESTART if spec is None else spec.restart

    def drain_config_for(self, target: str) -> DrainConfig:
        """The target's drain config; no drain (timeout 0, no hook) for an autodiscovered one."""
        spec = self.targets.get(target)
        return NO_DRAIN if spec is None else spec.drain

    def model_for(self, target: str) -> str | None:
        spec = self.targets.get(target)
        return None if spec is None else spec.model

    def facts(
        self, target: str, model: str | None = None, device_kind: str = "none", group: str | None = None
    ) -> TargetFacts:
        """What a policy profile matches on for ``target`` on this node."""
        return TargetFacts(self.node or "", target, model, device_kind, group, dict(self.node_labels))

    def units(self) -> dict[str, str | None]:
        return {name: spec.systemd_unit for name, spec in self.targets.items()}


def control_message(action: str, target: str, node: str | None, reason: str | None = None) -> dict[str, str | None]:
    """A message on the control channel (``guardian:control``): drain or undrain ``target``."""
    msg: dict[str, str | None] = {"action": action, "target": target, "node": node}
    if reason is not None:
        msg["reason"] = reason
    return msg


def log_fields(target: str, kind: str, incident: str | None) -> dict[str, str]:
    """The target / incident / kind keys of a log line (``--log-format json|logfmt``)."""
    out = {"target": target, "kind": kind}
    if incident is not None:
        out["incident"] = incident
    return out

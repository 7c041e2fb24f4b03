"""The policy table's shape (docs/policy.md): profiles matched per target (first match wins), the
percentage breaker, recurrence and the per-code device-fault rules. Typed, frozen, with defaults;
loaded by ``config/loader.py`` like every section. Decides nothing (``vllm_guardian.policy`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_guardian.config.schema_fields import SECONDS, Limit, Mode, setting

KEPT_EVENTS = 64  # the events the fault ledger keeps a device (state/device_faults.py): a count can reach no more


@dataclass(frozen=True)
class ProfileMatch:
    """Every key set must match (AND); a key left out matches anything. Patterns are full-match regexes."""

    node: str | None = setting(None, "regex", "regex on the node name")
    node_labels: dict[str, str] = setting({}, doc="labels the node must carry (key: value, all of them)")
    model: str | None = setting(None, "regex", "regex on the served model name")
    target: str | None = setting(None, "regex", "regex on the target name")
    device_kind: str | None = setting(None, "device_kind", "nvidia | ascend | none")
    group: str | None = setting(None, "regex", "regex on the target's group")


@dataclass(frozen=True)
class BreakerConfig:
    """At most ``max_fraction`` of one scope's targets restarting within ``window``, fleet-wide."""

    enabled: bool = setting(True, doc="the percentage breaker (beside policy.fleet's absolute cap)")
    scope: str = setting("model", "breaker_scope", "model | group | profile: whose targets are counted together")
    max_fraction: float = setting(0.5, "ratio", "share of the scope's targets that may restart within the window")
    window: float = setting(300.0, "positive", "seconds a restart counts against the breaker", bound=SECONDS)


@dataclass(frozen=True)
class RecurrenceConfig:
    """The same kind (and signature) on one target soon after a verified restart: escalate, no blind restart."""

    enabled: bool = setting(False, doc="escalate a recurrence instead of restarting again (opt-in in this version)")
    window: float = setting(
        3600.0, "positive", "seconds after a verified restart a repeat counts as recurring", bound=SECONDS
    )
    apply_workaround: bool = setting(
        False, doc="on a recurrence, restart once with the catalog's workaround (command/systemd modes only)"
    )


@dataclass(frozen=True)
class ProfileConfig:
    name: str = field(metadata={"check": "target_name", "doc": "the profile's name, shown by check-config and status"})
    match: ProfileMatch = field(default_factory=ProfileMatch)
    modes: dict[str, Mode] = setting({}, doc="kind -> observe | alert | remediate; '*' for every kind")
    dry_run: bool | None = setting(None, doc="null: policy.dry_run")
    max_restarts: int | None = setting(None, "positive", "null: policy.budget.max_restarts")
    budget_period: float | None = setting(None, "positive", "null: policy.budget.period")
    breaker: BreakerConfig | None = setting(None, doc="null: policy.breaker")
    recurrence: RecurrenceConfig | None = setting(None, doc="null: policy.recurrence")


@dataclass(frozen=True)
class DeviceFaultRule:
    """One device-fault code's rule, over the catalog's default."""

    code: str = field(
        metadata={
            "check": "fault_code",
            "doc": "a catalog code: xid:<n>, npu_health:<status>, a condition; <prefix>:* for a family",
        }
    )
    severity: str | None = setting(None, "fault_severity", "critical | warning | info; null: the catalog's")
    count: int = setting(
        1,
        "positive",
        "occurrences within window before it counts",
        bound=(Limit(f"at most {KEPT_EVENTS} (the events kept a device)", high=KEPT_EVENTS),),
    )
    window: float = setting(600.0, "positive", "seconds the count is taken over", bound=SECONDS)
    action: str | None = setting(
        None, "fault_action", "annotate | alert | refuse_restart | taint; null: from the catalog"
    )


@dataclass(frozen=True)
class DeviceCheckConfig:
    """Before a restart onto an accelerator: a quick health read, then an optional operator command."""

    enabled: bool = setting(True, doc="read the devices' health (NVML / npu-smi) before a restart onto them")
    command: tuple[str, ...] = setting(
        (), doc="argv run before the restart (no shell), e.g. [dcgmi, diag, -r, '1']; non-zero exit refuses it"
    )
    timeout: float = setting(
        60.0, "positive", "seconds the command may take; past it the restart is refused", bound=SECONDS
    )

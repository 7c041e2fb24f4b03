"""What the remediation is built from (``RemediationParts``, handed in once), the counts it keeps
for status (``Tally``) and the typed status section they make (``ActionCounts``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_guardian.clock import Clock
from vllm_guardian.host.http import HttpClient
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.host.process_control import ProcessControl
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.remediation.jobs import Submitter
from vllm_guardian.remediation.methods import METHODS, MethodRow
from vllm_guardian.remediation.methods.base import RestartMethod
from vllm_guardian.remediation.policy import RestartLedger
from vllm_guardian.remediation.settings import RemediationSettings

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.host.procfs import ProcFS
    from vllm_guardian.incidents import IncidentManager
    from vllm_guardian.policy.device_check import DeviceCheck as PreCheck
    from vllm_guardian.remediation.lease import Lease

PublishControl = Callable[[dict[str, Any]], object]
ReleaseCheck = Callable[[set[int]], "bool | None"]  # still held (None: no accelerator backend)
DeviceCheck = Callable[[str], "str | None"]  # target -> why its devices make a restart pointless (None: fine)
PreRestartCheck = Callable[[str], "PreCheck"]  # target -> the pre-restart device check (policy/device_check.py)
# target, incident, now -> why wait (None: go)
BeforeStart = Callable[[str, "str | None", float], "str | None"]


@dataclass(frozen=True)
class RemediationParts:
    settings: RemediationSettings
    clock: Clock
    control: ProcessControl
    async_runner: Submitter
    cmd_runner: CommandRunner
    incidents: IncidentManager
    ledger: RestartLedger
    procfs: ProcFS | None
    methods: Mapping[str, RestartMethod]
    log: logging.Logger
    lease: Lease | None = None  # the fleet lease (loop/group_gate.py adds the group lease of group members)
    kube: KubeClient | None = None
    publish_control: PublishControl = lambda msg: None
    release_check: ReleaseCheck = lambda pids: None
    device_check: DeviceCheck = lambda target: None
    # a group member waits for the group plan's earlier steps on other nodes (loop/group_stage.py)
    before_start: BeforeStart = lambda target, incident, now: None
    method_table: Sequence[MethodRow] = METHODS  # ``methods`` is built from it (again on a reload)
    http: HttpClient | None = None  # the server's own drain (vLLM's /checkpoint/prepare?mode=wait)
    fleet_client: Any = None  # the fleet store's Redis client (the percentage breaker); None: none configured
    pre_restart_check: PreRestartCheck | None = None  # None: no device check configured
    device_kind: Callable[[str], str] = lambda target: "none"  # nvidia | ascend | none (profiles match on it)
    # catalog signature id -> its machine-readable workaround (applied on a recurrence when a profile allows)
    workarounds: Mapping[str, Workaround] = field(default_factory=dict)

    def method(self, mode: str) -> RestartMethod:
        """The method of ``restart.mode`` (the config admits only the table's names)."""
        return self.methods.get(mode) or self.methods["signal"]


@dataclass
class Tally:
    """Counts for status: actions by status, restarts by target and outcome."""

    actions: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, status: str) -> None:
        self.actions[status] = self.actions.get(status, 0) + 1

    def restart(self, target: str, outcome: str) -> None:
        per = self.restarts.setdefault(target, {})
        per[outcome] = per.get(outcome, 0) + 1

    def section(self) -> ActionCounts:
        """A copy for the status (the counts go on changing)."""
        return ActionCounts(dict(self.actions), {k: dict(v) for k, v in self.restarts.items()})


@dataclass(frozen=True)
class ActionCounts:
    """The status's ``actions`` section: actions by outcome, restarts by target and outcome."""

    outcomes: Mapping[str, int]
    restarts: Mapping[str, Mapping[str, int]]

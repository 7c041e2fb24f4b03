"""The status of the guardian as of one tick: frozen values, typed all the way down, turned into
JSON only at the edge.

``status_view.build_status`` composes a ``StatusSnapshot`` from the sections the parts contribute
(at most once per tick, when first asked for). The exporter, the node heartbeat, the HTTP
listener and ``guardian probe`` read the snapshot itself; only the control socket serialises it
(``to_dict``: the JSON document ``guardian status --json`` prints and other tools read), and the
CLI reads that document back with ``from_dict`` (``from_dict(to_dict(s)) == s``). Field names are
the document's keys; ``None`` is ``null``; a node section that is ``None`` (a part not wired) is
left out of the document. Each section's type lives with the part that makes it (imported
below); the types here are the target row and the snapshot itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from vllm_guardian.config.status import ConfigStatus
from vllm_guardian.diagnosis.node_view import DeviceRow
from vllm_guardian.gates.status import GatesSummary, TargetGatesStatus, TrustStatus
from vllm_guardian.groups.orphans import OrphansStatus
from vllm_guardian.groups.stage import GroupStatus
from vllm_guardian.host.capabilities import MissingCapability
from vllm_guardian.host.server_files import ServerFilesStatus
from vllm_guardian.model import Incident
from vllm_guardian.state.readings import TargetDevice
from vllm_guardian.probes.procfs_status import ProcessStatus
from vllm_guardian.remediation.parts import ActionCounts
from vllm_guardian.remediation.remediator import SequenceStatus
from vllm_guardian.series.status import EngineStatus, MemoryStatus
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerStatus
from vllm_guardian.sinks.redis_sink import AlertsStatus
from vllm_guardian.state.device_faults import DeviceFaultStatus
from vllm_guardian.state.selfstats import GuardianSelf, ProbeCounters
from vllm_guardian.state.tracker import CanaryStatus, HealthStatus
from vllm_guardian.state.vllm_states import VllmStatus
from vllm_guardian.surface.http_stats import HttpStatus
from vllm_guardian.surface.connection_slots import ConnectionCounts
from vllm_guardian.surface.kube_status import KubernetesStatus
from vllm_guardian.surface.status_codec import decode, plain

SCHEMA = 1


@dataclass(frozen=True)
class TargetStatus:
    name: str
    source: str
    pid: int
    starttime: int
    port: int | None
    api_url: str | None
    model: str | None
    phase: str  # serving | warming | paused | sleeping | checkpointing | recovering | retired | incident | gone
    # | draining | drained | stopping | starting | verifying | failed
    serving: bool  # should take traffic (the readiness endpoint answers 200)
    remediation: SequenceStatus | None
    decision: str | None
    budget_left: int
    ready: bool
    health: HealthStatus | None
    engine: EngineStatus
    canary: CanaryStatus | None
    processes: tuple[ProcessStatus, ...]
    accelerators: tuple[TargetDevice, ...]
    memory: MemoryStatus
    suspects: Mapping[str, str]  # kind -> summary of an unconfirmed finding
    incidents: tuple[str, ...]  # kinds of the open incidents
    errors: Mapping[str, str]  # episode key -> message
    gates: TargetGatesStatus | None = None  # output-correctness gates: health score, baseline, notes
    serving_reason: str = ""  # why (not) serving, CamelCase (surface/readiness.py; the readiness gate's reason)
    serving_message: str = ""
    socket: str = ""  # how its claim on its port was checked (model.Target.socket); "argv": not verified
    port_verified: bool = True  # False: matched by its command line alone, never restarted automatically
    other_listeners: int = 0  # sockets on its port that do not serve its URL (a neighbour's; ignored)
    auto_remediation: str = "on"  # or "off (<why>)": maintenance, autodiscovered, port not verified, budget
    # reason -> count of what the guardian dropped of its input (engines, page_too_large, too_many_samples,
    # series): probes/vllm_http.py, series/store.py
    metrics_dropped: Mapping[str, int] = field(default_factory=dict)
    namespace: str | None = None  # the Kubernetes pod it runs in (match.kubernetes), else None
    pod: str | None = None
    vllm: VllmStatus | None = None  # its vLLM version, the capability row used and vLLM's own states
    profile: str = "default"  # the policy profile it is remediated under (docs/policy.md)
    workaround: WorkaroundStatus | None = None  # the known-bug workaround it runs with; None: none


@dataclass(frozen=True)
class WorkaroundStatus:
    """A catalog workaround the target was started with (``<state_dir>/workarounds.json``)."""

    signature: str
    incident: str  # the recurring incident it was applied for
    args: tuple[str, ...]
    env: Mapping[str, str]
    at: float  # wall time applied


@dataclass(frozen=True)
class Unmatched:
    target: str  # a configured target
    reason: str  # why it was not found


@dataclass(frozen=True)
class CapabilitiesStatus:
    missing: tuple[MissingCapability, ...] = ()  # what the guardian cannot do here (host.capabilities)


#: Node sections of parts that may not be wired (no gates, no Kubernetes, ``guardian probe``):
#: ``None`` leaves the key out of the document.
OPTIONAL_SECTIONS = frozenset(
    {
        "gates",
        "device_faults",
        "alerts",
        "alertmanager",
        "config",
        "api_keys",
        "kubernetes",
        "http",
        "trust",
        "listeners",
    }
)


@dataclass(frozen=True)
class StatusSnapshot:
    node: str
    version: str
    time: float  # wall
    uptime_s: float | None
    guardian: GuardianSelf
    probes: Mapping[str, ProbeCounters]
    targets: tuple[TargetStatus, ...]
    unmatched: tuple[Unmatched, ...]
    incidents: tuple[Incident, ...]  # open
    actions: ActionCounts
    maintenance_until: float | None
    accelerators: tuple[DeviceRow, ...] = ()  # every device of the node (diagnosis.node_view)
    accelerators_refused: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # backend -> reason -> input
    errors: Mapping[str, str] = field(default_factory=dict)
    gates: GatesSummary | None = None  # external gate reports (gates.shared)
    device_faults: Mapping[str, DeviceFaultStatus] | None = None  # devices with a fault recorded
    alerts: AlertsStatus | None = None  # the alert sink
    alertmanager: AlertmanagerStatus | None = None  # the direct push to Alertmanager (configured)
    config: ConfigStatus | None = None  # reloads
    api_keys: Mapping[str, str] | None = None  # target -> where its API key came from
    kubernetes: KubernetesStatus | None = None  # the Kubernetes publisher
    http: HttpStatus | None = None  # the HTTP listener: refusals, its web config
    trust: TrustStatus | None = None  # the trust keys in force (ids only) and the control channel's messages
    # "socket" (the control socket), "http" (the HTTP listener) -> connections dropped, by reason
    listeners: Mapping[str, ConnectionCounts] | None = None
    capabilities: CapabilitiesStatus = field(default_factory=CapabilitiesStatus)
    server_files: ServerFilesStatus = field(default_factory=ServerFilesStatus)  # refused on a server's behalf
    groups: tuple[GroupStatus, ...] = ()
    orphans: OrphansStatus = field(
        default_factory=OrphansStatus
    )  # VLLM:: processes with no live API server  # multi-node groups this node hosts members of (groups/stage.py)
    schema: int = SCHEMA

    def target(self, name: str) -> TargetStatus | None:
        return next((t for t in self.targets if t.name == name), None)

    @cached_property
    def document(self) -> dict[str, Any]:
        """The JSON document (built once per snapshot; treat it as read-only)."""
        return {
            f.name: plain(getattr(self, f.name))
            for f in fields(self)
            if not (f.name in OPTIONAL_SECTIONS and getattr(self, f.name) is None)
        }

    def to_dict(self) -> dict[str, Any]:
        return self.document

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> StatusSnapshot:
        """The snapshot a ``to_dict`` document holds; raises ``StatusDocumentError`` (a ``ValueError``)
        naming the first key of the wrong shape."""
        snapshot: StatusSnapshot = decode(cls, doc)
        return snapshot

"""The one place the daemon's parts are built: each once, by constructor injection, in dependency order.

``assemble(cfg, seams, ...)`` builds, in this order, and hands the lot to ``Daemon`` (which builds
nothing and only ticks):

1. what sits outside the loop: the Kubernetes client (when a target restarts or is matched through
   it), the scrubber of the secret values it holds (``known_secrets``), the incident store, the
   evidence collector, the diagnoser, the trust keys in force (``gates.trust``, a ``KeyRing`` a
   reload re-reads); on the one Redis connection (``sinks/redis_conn.py``), when there is one, the
   fleet lease, the control publisher (its messages stamped and signed by the ``ControlChannel``)
   and the gates' fingerprint exchange;
2. the state the probes write and the detectors read: series store, tracker, episode log, the
   runner of off-loop jobs, self-stats, the readings (device-fault ledger, the gates' shared
   state with its trust keys and exchange), the capabilities it lacks here (each said once);
3. the stages of the tick: discovery (``TargetsStage``), the probes of the table
   (``ProbeScheduler``), the incident manager, the restart ledger and the remediator (its
   restart methods from the methods table), the transition fan-out (log line + sinks) and the
   responder.

**Ports, for the two calls that go back up the order.** The probes record a diagnosis step on an
incident through the responder (``record_action``), and the fan-out tells the responder an incident
opened (``incident_opened``, evidence before action) while the responder emits through the fan-out.
Neither side can be built with the other in hand, so the assembler makes a typed ``Port``
(``loop/ports.py``) first, hands it to the part built earlier as a plain callable, builds the later
part, and binds the port to it, once, before returning. No part has a hook list appended to or an
attribute assigned after it was built.

A config reload (``loop/reload.py``) applies the new config to these parts in place; the probes
are rebuilt through ``build_probes`` with the same ``ProbeParts``.
"""

from __future__ import annotations

import dataclasses
from functools import partial
import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vllm_guardian.bundle.evidence import EvidenceCollector
from vllm_guardian.bundle.known_secrets import KnownSecrets
from vllm_guardian.config.schema import Config
from vllm_guardian.detectors import accel_fault
from vllm_guardian.detectors.kinds import series_store_for
from vllm_guardian.diagnosis.service import Diagnoser
from vllm_guardian.discovery.platform_match import platform_for
from vllm_guardian.discovery.targets import DiscoveryHook, TargetsStage
from vllm_guardian.errors import ConfigError, GuardianError
from vllm_guardian.gates.control import ControlChannel
from vllm_guardian.gates.exchange import FingerprintExchange, PeerFingerprints, RedisHashes
from vllm_guardian.gates.shared import GatesShared
from vllm_guardian.gates.trust import KeyRing
from vllm_guardian.host.api_keys import BearerHttpClient
from vllm_guardian.host.capabilities import Capabilities, from_privileges, read_own_mask
from vllm_guardian.incidents import IncidentManager, IncidentStore
from vllm_guardian.loop.daemon import Daemon, DaemonParts
from vllm_guardian.loop.fanout import Sink, TransitionFanout
from vllm_guardian.loop.ports import Port
from vllm_guardian.loop.tables import Tables
from vllm_guardian.loop.responder import Decided, Responder, ResponderPorts, ResponderSettings
from vllm_guardian.model import Action, Incident
from vllm_guardian.probes.accel import missing_backends
from vllm_guardian.loop.device_gate import PreRestartCheck, TargetDevices
from vllm_guardian.detectors.device_catalog import shipped
from vllm_guardian.probes.base import ProbeParts, Readings
from vllm_guardian.probes.scheduler import ProbeScheduler
from vllm_guardian.probes.table import build_probes, probe_names
from vllm_guardian.loop.group_gate import GroupGate
from vllm_guardian.loop.group_requests import GroupExchange
from vllm_guardian.loop.orphan_watch import OrphanWatch
from vllm_guardian.remediation.lease import FleetLease
from vllm_guardian.sinks.group_lease import GroupLease
from vllm_guardian.remediation.methods import build_methods, restart_mode_problems
from vllm_guardian.remediation.parts import PublishControl, RemediationParts
from vllm_guardian.remediation.policy import RestartLedger
from vllm_guardian.remediation.remediator import Remediator
from vllm_guardian.remediation.settings import RemediationSettings
from vllm_guardian.seams import Seams
from vllm_guardian.loop.group_stage import GroupStage
from vllm_guardian.sinks.redis_conn import ControlPublisher, RedisConnection
from vllm_guardian.surface.status_view import StatusSources
from vllm_guardian.state.async_runner import AsyncRunner
from vllm_guardian.policy import fault_rules
from vllm_guardian.state.device_faults import DeviceFaults
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.state.selfstats import SelfStats
from vllm_guardian.state.tracker import Tracker

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient


def assemble(
    cfg: Config,
    seams: Seams,
    *,
    redis: RedisConnection | None = None,
    keys: KeyRing | None = None,
    control: ControlChannel | None = None,
    sinks: Iterable[Sink] = (),
    on_update: Iterable[Callable[[Incident], None]] = (),
    on_decision: Iterable[Decided] = (),
    status_sources: StatusSources | None = None,
    runner: AsyncRunner | None = None,
    log: logging.Logger | None = None,
    kube: KubeClient | None = None,
    on_discovery: Iterable[DiscoveryHook] = (),
    tables: Tables | None = None,
    kube_from_environment: bool = True,
    scrub: KnownSecrets | None = None,
) -> Daemon:
    """The daemon with every part built. ``redis``: the one Redis connection (None: no lease, no
    control messages, no fingerprint exchange); ``keys``: the trust keys in force when already loaded
    (None: loaded here from ``gates.trust``; a bad keys file is a ``ConfigError``); ``control``: what
    stamps and checks control messages (None: one made here); ``kube``: the Kubernetes API client
    (default: from the environment, when a target restarts or is matched through Kubernetes, unless
    ``kube_from_environment`` is False: the caller tried already); ``tables``: the probes, kinds and
    restart methods (default: the package's own; ``loop/tables.py``); ``scrub``: the known secret
    values out of incident.json and the evidence (default: ``known_secrets`` of what is given). A
    ``restart.mode`` that names no method of the table is a ``ConfigError``."""
    tables = tables or Tables()
    if problems := restart_mode_problems(cfg, tables.methods):
        raise ConfigError(problems)
    log = log or logging.getLogger("guardian")
    node = cfg.node or os.uname().nodename
    clock = seams.clock
    keys = keys if keys is not None else KeyRing(cfg.gates.trust.keys_file, cfg.gates.trust.key_env)
    # 1. outside the loop
    if kube is None and kube_from_environment:
        kube = kube_client(cfg, targets_need_kube(cfg))
    scrub = scrub if scrub is not None else known_secrets(seams, redis, keys, kube)
    store = IncidentStore(cfg.state_dir, scrub=scrub.scrub)
    evidence = EvidenceCollector(
        cfg.evidence,
        store.dir_for,
        seams.commands,
        seams.proc,
        seams.clock,
        details=seams.process_details,
        scrub=scrub.scrub,
    )
    diagnoser = Diagnoser.from_config(
        cfg, runner=seams.commands, http=seams.http, kube=_kube_factory(kube, cfg), scrub=scrub.scrub, files=seams.files
    )
    lease: GroupGate | None = None
    fleet: FleetLease | None = None
    publish_control: PublishControl = _no_control
    if redis is not None:
        f = cfg.policy.fleet
        fleet = FleetLease(
            redis.client,
            node,
            f.max_concurrent_restarts,
            f.lease_ttl,
            f.when_redis_down,
            replicas=f.lease_replicas if getattr(redis, "highly_available", False) else 0,
            replica_timeout=f.lease_replica_timeout,
        )
        control = control or ControlChannel(node, keys, cfg.gates.trust, log, clock.wall, started=clock.wall())
        publish_control = ControlPublisher(redis, cfg.alerts.control_channel, control.stamp)
    hooks, sources = list(on_discovery), status_sources or StatusSources()
    if isinstance(seams.http, BearerHttpClient):  # the keys follow each discovery pass
        hooks.insert(0, seams.http.keys.update)
        sources = dataclasses.replace(sources, api_keys=seams.http.keys)
    # 2. the state probes write and detectors read
    series = series_store_for(cfg)
    tracker = Tracker.from_config(cfg)
    episodes = EpisodeLog(log)
    runner = runner or AsyncRunner(max_workers=8)
    stats = SelfStats.for_probes(probe_names(tables.probes))
    readings = Readings(
        device_faults=DeviceFaults(
            cfg.detectors.accel_fault.window,
            judge=fault_rules.judge(cfg.policy.device_fault_rules, cfg.kubernetes.taint_on_device_fault),
        ),
        gates=gates_shared(cfg, keys, redis.client if redis else None, clock.wall, log) if cfg.gates.enabled else None,
    )
    capabilities = Capabilities(log)  # what it cannot do here, each said once
    for lack in (
        *from_privileges(read_own_mask(seams.proc)),
        *missing_backends(cfg.accelerators, seams.accel_backends),
    ):
        capabilities.note(lack)
    # 3. the stages of the tick; the two ports back up the order are bound before returning
    record_action: Port[[str, Action], None] = Port("record_action")
    group_leases = GroupLease(redis.client, node) if redis is not None else None
    exchange = (
        GroupExchange(
            node,
            redis.client,
            keys,
            group_leases,
            cfg.policy.fleet.lease_ttl,
            seams.commands,
            cfg.evidence.pyspy,
            os.path.join(cfg.state_dir, "group-stacks"),
            record_action,
            log.getChild("groups"),
            on_restart=lambda group, incident: groups.on_restart(group, incident),
            acting=lambda group: lease is not None and group in lease.holding().values(),
        )
        if redis is not None and group_leases is not None
        else None
    )
    groups = GroupStage(
        cfg.groups, node, redis.client if redis is not None else None, keys, clock.wall, log, exchange=exchange
    )
    if fleet is not None and group_leases is not None:  # one actor per group: a member's restart needs the lease
        lease = GroupGate(fleet, group_leases, partial(groups.group_of, tracker.targets), cfg.policy.fleet.lease_ttl)
        groups.delegate = lease.delegate
    incident_opened: Port[[Incident], None] = Port("incident_opened")
    targets = TargetsStage(
        cfg,
        seams.proc,
        tracker,
        series,
        log,
        platform=platform_for(cfg, seams.proc, kube, seams.commands),
        on_discovery=hooks,
        capabilities=capabilities,
        files=seams.files,
        rewrite=groups.rewrite,
    )
    probe_parts = ProbeParts(cfg, seams, tracker, series, readings, log)
    probes = ProbeScheduler(
        build_probes(probe_parts, tables.probes), runner, stats, episodes, series, record=record_action
    )
    incidents = IncidentManager(node, clock, store, cfg.detectors)
    periods = [p.budget_period for p in cfg.policy.profiles if p.budget_period is not None]
    ledger = RestartLedger(cfg.state_dir, keep=max([cfg.policy.budget.period, *periods]))
    settings = RemediationSettings.from_config(cfg)
    devices = TargetDevices(readings)
    remediator = Remediator(
        RemediationParts(
            settings,
            clock,
            seams.control,
            runner,
            seams.commands,
            incidents,
            ledger,
            seams.proc,
            build_methods(settings.units(), tables.methods),
            log.getChild("remediation"),
            lease=lease,
            kube=kube,
            publish_control=publish_control,
            release_check=readings.device_memory_held,
            device_check=DeviceBlock(readings, clock.monotonic),
            method_table=tables.methods,
            http=seams.http,
            fleet_client=redis.client if redis is not None else None,
            pre_restart_check=PreRestartCheck.configured(
                cfg.policy.device_check,
                devices,
                seams.accel_backends,
                lambda: readings.device_faults.catalog if readings.device_faults is not None else shipped(),
                seams.commands,
                clock.monotonic,
                lambda: readings.device_faults.judge if readings.device_faults is not None else None,
            ),
            device_kind=devices.kind,
            workarounds={s.id: s.workaround_apply for s in diagnoser.signatures if s.workaround_apply is not None},
            before_start=groups.before_start,
        )
    )
    fanout = TransitionFanout(incident_opened, sinks, stats, episodes, clock, log)
    responder = Responder(
        settings=ResponderSettings(cfg.detectors, {t.name: t for t in cfg.targets}, tables.kinds),
        ports=ResponderPorts(
            clock=clock,
            runner=runner,
            tracker=tracker,
            series=series,
            readings=readings,
            incidents=incidents,
            remediator=remediator,
            evidence=evidence,
            episodes=episodes,
            emit=fanout.emit,
            log=log,
            diagnoser=diagnoser,
            on_update=on_update,
            on_decision=on_decision,
        ),
    )
    record_action.bind(responder.record_action)
    groups.restart = lambda target, why: log.info(
        "group restart of %s: %s", target, responder.control({"cmd": "restart", "target": target, "reason": why})
    )
    incident_opened.bind(responder.incident_opened)
    return Daemon(
        DaemonParts(
            cfg=cfg,
            seams=seams,
            kube=kube,
            log=log,
            node=node,
            series=series,
            tracker=tracker,
            episodes=episodes,
            runner=runner,
            stats=stats,
            readings=readings,
            capabilities=capabilities,
            targets=targets,
            probes=probes,
            incidents=incidents,
            ledger=ledger,
            remediator=remediator,
            fanout=fanout,
            responder=responder,
            status_sources=sources,
            detectors=tables.detectors(),
            tables=tables,
            groups=groups,
            orphans=OrphanWatch(
                seams.proc,
                seams.control.signal,
                interval=cfg.groups.orphan_interval,
                min_rss=cfg.groups.orphan_min_rss,
                stop=cfg.groups.stop_orphans and not cfg.policy.dry_run,
                page_size=os.sysconf("SC_PAGE_SIZE"),
                log=log.getChild("orphans"),
            ),
        )
    )


def gates_shared(
    cfg: Config,
    keys: KeyRing | None,
    redis: RedisHashes | None,
    wall: Callable[[], float],
    log: logging.Logger,
    exchange: PeerFingerprints | None = None,
) -> GatesShared:
    """What the gates share (ledger, intake, status lines), with the trust keys (``gates.trust``,
    loaded here unless handed in) and the fingerprint exchange (L4 across nodes): ``exchange``
    when handed in, else one on ``redis`` (the Redis connection's client), else none. Reports
    stamped before now (+ ``max_skew``) are refused (``gates.intake``)."""
    g = cfg.gates
    keys = keys if keys is not None else KeyRing(g.trust.keys_file, g.trust.key_env)
    glog = log.getChild("gates")
    if keys.enabled:
        glog.info(
            "gates: trust keys from %s (kids %s): unsigned messages are dropped",
            keys.current.source,
            ", ".join(keys.current.kids),
        )
    else:
        glog.warning(
            "gates: no trust key (gates.trust.keys_file / key_env): external reports and other nodes' "
            "fingerprints can raise an alert, never a restart"
        )
    if exchange is None and redis is not None:
        exchange = FingerprintExchange(redis, cfg.node or "", wall, keys, g.trust.max_skew, g.trust.min_peer_nodes)
    return GatesShared(cfg.node or "", g.interval, glog, g.trust, keys, exchange=exchange, started=wall())


class DeviceBlock:
    """Why a restart of a server would land on a broken device (None: it would not): the
    remediator's ``device_check``, read from the device-fault ledger of the readings."""

    def __init__(self, readings: Readings, monotonic: Callable[[], float]) -> None:
        self.readings, self.monotonic = readings, monotonic

    def __call__(self, target: str) -> str | None:
        ledger = self.readings.device_faults
        if ledger is None:
            return None
        faults = ledger.blocking(target, self.monotonic())
        if not faults:
            return None
        f = max(faults, key=accel_fault.precedence)
        devices = sorted({r.device for r in faults})
        return (
            f"restart refused: device {', '.join(devices)} reported {f.label()}; a restart cannot help "
            f"({f.entry.action.replace('_', ' ')}: {f.entry.what_to_do}); escalated to the node alert accel_fault"
        )


def _no_control(msg: dict[str, Any]) -> object:
    return None


def targets_need_kube(cfg: Config) -> bool:
    """Does a target restart or get matched through the Kubernetes API?"""
    return any(
        t.restart.mode == "kubernetes" or (t.match.kubernetes is not None and t.match.kubernetes.namespace)
        for t in cfg.targets
    )


def kube_client(cfg: Config, needed: bool) -> KubeClient | None:
    """A Kubernetes client from the environment when ``needed`` (None, logged, when the API cannot
    be reached or may not be called, e.g. a token over plain http; None when not needed)."""
    if not needed:
        return None
    from vllm_guardian.host.kube import KubeClient

    try:
        k = cfg.kubernetes
        return KubeClient.from_environment(dict(os.environ), k.kubeconfig, k.context, k.timeout, k.plain_http_loopback)
    except GuardianError as e:
        logging.getLogger("guardian").warning("kubernetes API off: %s", e)
        return None


def known_secrets(
    seams: Seams, redis: RedisConnection | None = None, keys: KeyRing | None = None, kube: KubeClient | None = None
) -> KnownSecrets:
    """The secret values the guardian holds, for the scrubber of everything it writes: the servers'
    API keys (as each discovery pass finds them), the Redis password, the trust keys (every one
    held since the start: a reload may add or retire some), the Kubernetes token."""
    sources: list[Callable[[], Iterable[str | bytes | None]]] = []
    if isinstance(seams.http, BearerHttpClient):
        sources.append(seams.http.keys.secrets)
    if redis is not None and hasattr(redis, "secrets"):
        sources.append(redis.secrets)
    if keys is not None:
        sources.append(keys.secrets)
    if kube is not None:
        sources.append(kube.secrets)
    return KnownSecrets(sources)


def _kube_factory(kube: KubeClient | None, cfg: Config) -> Callable[[], Any]:
    """The Kubernetes client crash forensics reads previous container logs with: the one remediation
    built, else one made when first needed (in-cluster or the kubeconfig; BackendUnavailable without)."""
    if kube is not None:
        built = kube
        return lambda: built
    from vllm_guardian.host.kube import KubeClient

    k = cfg.kubernetes
    return lambda: KubeClient.from_environment(
        dict(os.environ), k.kubeconfig, k.context, k.timeout, k.plain_http_loopback
    )

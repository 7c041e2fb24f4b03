"""The daemon with everything production wires around it: the alert sink (embedded Redis by
default), the fleet lease on the same Redis, the Kubernetes client when a target needs it,
alert events for incident transitions and updates, re-notification and the node heartbeat.

Used by ``guardian run`` and ``guardian demo`` so both run the very same wiring.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from .clock import SystemClock
from .config_schema import Config
from .daemon import Daemon
from .errors import GuardianError
from .host.http import StdlibHttpClient
from .host.procfs import ProcFS
from .incidents import IncidentStore
from .lease import FleetLease
from .model import Status, Transition
from .sinks.events import AlertEmitter, IncidentAlerts
from .sinks.fleet import node_summary
from .sinks.gate_decisions import GateDecisions
from .sinks.redis_sink import AlertSink
from .gates.exchange import FingerprintExchange
from .gates.listener import ReportsListener


def build_daemon(cfg: Config, sink: AlertSink | None = None, clock: SystemClock | None = None) -> tuple[Daemon, SystemClock]:
    clock = clock or SystemClock()
    kube = None
    if any(t.restart.mode == "kubernetes" for t in cfg.targets):
        from .host.kube import KubeClient

        try:
            kube = KubeClient.in_cluster(dict(os.environ))
        except GuardianError as e:
            logging.getLogger("guardian").warning("%s", e)
    lease = None
    if sink is not None:
        f = cfg.policy.fleet
        lease = FleetLease(sink.client, cfg.node, f.max_concurrent_restarts, f.lease_ttl, f.when_redis_down)
    daemon = Daemon(cfg, clock, ProcFS(cfg.probes.procfs.proc_root), StdlibHttpClient(),
                    store=IncidentStore(cfg.state_dir), lease=lease, kube=kube,
                    publish_control=sink.control if sink is not None else None)
    return daemon, clock


@dataclass
class Runtime:
    daemon: Daemon
    clock: SystemClock
    sink: AlertSink
    alerts: IncidentAlerts
    emitter: AlertEmitter
    _next_heartbeat: float = float("-inf")
    listener: ReportsListener | None = None
    decisions: GateDecisions | None = None

    @classmethod
    def start(cls, cfg: Config) -> "Runtime":
        sink = AlertSink.from_config(cfg.alerts, cfg.state_dir, cfg.node)
        daemon, clock = build_daemon(cfg, sink)
        emitter = AlertEmitter(cfg.node, cfg.alerts.renotify_interval)
        alerts = IncidentAlerts(emitter, sink.publish, clock)
        daemon.sinks.append(alerts)
        daemon.on_update.append(lambda inc: sink.publish(
            emitter.on_transition(Transition(inc, Status.FIRING), clock.wall(), clock.monotonic())))
        daemon.status_extras["alerts"] = sink.stats
        rt = cls(daemon, clock, sink, alerts, emitter)
        rt._wire_gates(cfg)
        return rt

    def _wire_gates(self, cfg: Config) -> None:
        """The gates' Redis side: fingerprints across nodes (L4), external reports, decisions."""
        gates = self.daemon.readings.gates
        if gates is None:
            return
        log = self.daemon.log.getChild("gates")
        gates.exchange = FingerprintExchange(self.sink.client, cfg.node or "", self.clock.wall)
        self.listener = ReportsListener(self.sink.client, cfg.gates.reports_channel, gates.accept_report,
                                        self.clock.monotonic, self.clock.wall, log).start()
        self.decisions = GateDecisions(self.sink.client, cfg.gates.control_channel, cfg.node or "",
                                       lambda: cfg.detectors.output_corruption.mode, self.clock.wall, log)
        self.daemon.sinks.append(self.decisions)

    def after_tick(self) -> None:
        """Re-notify firing incidents and, a few times per heartbeat TTL, write the node
        heartbeat; both only enqueue (the sink's thread talks to Redis)."""
        self.alerts.renotify(self.daemon.incidents.open_incidents())
        now = self.clock.monotonic()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.daemon.cfg.alerts.heartbeat_ttl / 3
            self.sink.heartbeat(node_summary(self.daemon.status(), self.sink.stats()))

    def close(self) -> None:
        self.daemon.runner.shutdown()
        if self.listener is not None:
            self.listener.stop()
        if self.decisions is not None:
            self.decisions.close()
        self.sink.close()

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
from .host.api_keys import ApiKeys, BearerHttpClient
from .host.http import StdlibHttpClient
from .host.procfs import ProcFS
from .incidents import IncidentStore
from .lease import FleetLease
from .model import Status, Transition
from .sinks.events import AlertEmitter, IncidentAlerts
from .sinks.fleet import node_summary
from .sinks.redis_sink import AlertSink


def build_daemon(cfg: Config, sink: AlertSink | None = None, clock: SystemClock | None = None) -> tuple[Daemon, SystemClock]:
    clock = clock or SystemClock()
    kube = None
    if any(t.restart.mode == "kubernetes" or (t.match.kubernetes is not None and t.match.kubernetes.namespace)
           for t in cfg.targets):
        from .host.kube import KubeClient

        try:
            kube = KubeClient.in_cluster(dict(os.environ))
        except GuardianError as e:
            logging.getLogger("guardian").warning("%s", e)
    lease = None
    if sink is not None:
        f = cfg.policy.fleet
        lease = FleetLease(sink.client, cfg.node, f.max_concurrent_restarts, f.lease_ttl, f.when_redis_down)
    procfs = ProcFS(cfg.probes.procfs.proc_root)
    keys = ApiKeys(cfg, procfs)  # servers started with --api-key: the canary authenticates
    daemon = Daemon(cfg, clock, procfs, BearerHttpClient(StdlibHttpClient(), keys),
                    store=IncidentStore(cfg.state_dir), lease=lease, kube=kube,
                    publish_control=sink.control if sink is not None else None)
    daemon.on_discovery.append(keys.update)
    daemon.status_extras["api_keys"] = keys.origins
    return daemon, clock


@dataclass
class Runtime:
    daemon: Daemon
    clock: SystemClock
    sink: AlertSink
    alerts: IncidentAlerts
    emitter: AlertEmitter
    _next_heartbeat: float = float("-inf")

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
        return cls(daemon, clock, sink, alerts, emitter)

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
        self.sink.close()

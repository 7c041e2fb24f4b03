"""The one place the guardian is wired: seams, daemon, alert sink, listeners, systemd.

- ``real_seams(cfg)``: the real OS contacts (clock, /proc under the configured root, HTTP,
  subprocesses, process control, the accelerator backends ``accelerators:`` asks for).
- ``build_daemon(cfg, seams, ...)``: the daemon with its incident store, evidence collector,
  fleet lease (on the alert sink's Redis) and Kubernetes client (when a target restarts
  through it).
- ``Runtime.start(cfg)``: all of it as ``guardian run`` and ``guardian demo`` run it: the alert
  sink (embedded Redis by default), alert events for incident transitions and updates,
  re-notification and the node heartbeat, the control socket, the HTTP listener (``/metrics``,
  ``/healthz``, readiness) and sd_notify. ``run(stop)`` runs the loop until ``stop`` is set;
  ``close()`` stops everything.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .actions.evidence import EvidenceCollector
from .api import ControlSocket
from .clock import SystemClock
from .config_schema import Config
from .daemon import Daemon, Sink
from .errors import GuardianError
from .exporter import build_registry
from .host.api_keys import ApiKeys, BearerHttpClient
from .host.http import StdlibHttpClient
from .host.process_control import OsProcessControl
from .host.procfs import ProcFS
from .host.runner import SubprocessRunner
from .http_api import Heartbeat, HttpApi
from .incidents import IncidentStore
from .lease import FleetLease
from .model import Incident, Status, Transition
from .probes.accel import make_backends
from .probes.async_runner import AsyncRunner
from .seams import Seams
from .sdnotify import SdNotify
from .sinks.events import AlertEmitter, IncidentAlerts
from .sinks.fleet import node_summary
from .sinks.redis_sink import AlertSink

log = logging.getLogger("guardian")


def real_seams(cfg: Config, clock: SystemClock | None = None) -> Seams:
    """The machine itself. NVML / npu-smi are touched here, at start, never at import."""
    proc = ProcFS(cfg.probes.procfs.proc_root)
    commands = SubprocessRunner()
    http = BearerHttpClient(StdlibHttpClient(), ApiKeys(cfg, proc))  # servers started with --api-key
    return Seams(clock or SystemClock(), proc, http, commands, OsProcessControl(proc),
                 make_backends(cfg.accelerators, commands, log))


def build_daemon(cfg: Config, seams: Seams, *, sink: AlertSink | None = None, sinks: Iterable[Sink] = (),
                 on_update: Iterable[Callable[[Incident], None]] = (),
                 status_extras: dict[str, Callable[[], object]] | None = None,
                 runner: AsyncRunner | None = None, log: logging.Logger | None = None) -> Daemon:
    store = IncidentStore(cfg.state_dir)
    evidence = EvidenceCollector(cfg.evidence, store.dir_for, seams.commands, seams.proc, seams.clock)
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
    daemon = Daemon(cfg, seams, store=store, evidence=evidence, lease=lease, kube=kube,
                    publish_control=sink.control if sink is not None else None, sinks=sinks,
                    on_update=on_update, status_extras=status_extras, runner=runner, log=log)
    if isinstance(seams.http, BearerHttpClient):  # the keys follow each discovery pass
        daemon.targets.on_discovery.append(seams.http.keys.update)
        daemon.status_extras["api_keys"] = seams.http.keys.origins
    return daemon


@dataclass
class Runtime:
    daemon: Daemon
    clock: SystemClock
    sink: AlertSink
    alerts: IncidentAlerts
    emitter: AlertEmitter
    control: ControlSocket
    http: HttpApi | None
    loop_beat: Heartbeat
    sd: SdNotify = field(default_factory=SdNotify)
    _next_heartbeat: float = float("-inf")

    @classmethod
    def start(cls, cfg: Config) -> Runtime:
        clock = SystemClock()
        sink = AlertSink.from_config(cfg.alerts, cfg.state_dir, cfg.node)
        emitter = AlertEmitter(cfg.node, cfg.alerts.renotify_interval)
        alerts = IncidentAlerts(emitter, sink.publish, clock)

        def republish(inc: Incident) -> None:  # an incident changed without a transition
            sink.publish(emitter.on_transition(Transition(inc, Status.FIRING), clock.wall(), clock.monotonic()))

        daemon = build_daemon(cfg, real_seams(cfg, clock), sink=sink, sinks=[alerts], on_update=[republish],
                              status_extras={"alerts": sink.stats})
        control = ControlSocket(cfg.socket_path(), {
            "status": lambda req: daemon.status(),
            "ping": lambda req: "pong",
            "drain": daemon.control_request,
            "restart": daemon.control_request,
            "undrain": daemon.control_request,
        })
        beat = Heartbeat(clock.monotonic)
        http = None
        if cfg.api.http:
            http = HttpApi(cfg.api.http, registry=build_registry(daemon.status, lambda: daemon.stats),
                           status=daemon.status, tick_age=beat.age, max_tick_age=3 * cfg.interval)
        rt = cls(daemon, clock, sink, alerts, emitter, control, http, beat)
        try:
            if http is not None:
                http.start()
            control.start()
        except BaseException:
            rt.close()
            raise
        return rt

    def run(self, stop: threading.Event) -> None:
        """The loop, until ``stop`` is set (then ``clock.wake()`` ends the current sleep)."""
        try:
            self.daemon.run(stop, on_tick=self.after_tick)
        finally:
            self.sd.stopping()

    def after_tick(self) -> None:
        """The systemd watchdog and ``/healthz`` are fed by the loop itself (a frozen loop
        stops them); firing incidents are re-notified and, a few times per heartbeat TTL, the
        node heartbeat is written (both only enqueue: the sink's thread talks to Redis)."""
        self.loop_beat.beat()
        self.alerts.renotify(self.daemon.incidents.open_incidents())
        now = self.clock.monotonic()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.daemon.cfg.alerts.heartbeat_ttl / 3
            self.sink.heartbeat(node_summary(self.daemon.status(), self.sink.stats()))
        self.sd.after_tick(f"{len(self.daemon.tracker.targets)} targets")

    def close(self) -> None:
        self.control.stop()
        if self.http is not None:
            self.http.stop()
        self.daemon.runner.shutdown()
        self.sink.close()

"""The one place the guardian is wired: seams, daemon, alert sink, listeners, systemd.

- ``real_seams(cfg)``: the real OS contacts (clock, /proc under the configured root, HTTP,
  subprocesses, process control, the accelerator backends ``accelerators:`` asks for).
- ``build_daemon(cfg, seams, ...)``: the daemon with every part, built by the assembler
  (``loop/assemble.py``: incident store, evidence collector, fleet lease on the Redis
  connection, Kubernetes client when a target restarts through it, ...).
- ``Runtime.start(cfg)``: all of it as ``guardian run`` and ``guardian demo`` run it, built once
  in order and nothing written into a part afterwards: the one Redis connection
  (``sinks/redis_conn.py``, embedded Redis by default) handed to every Redis user, the alert
  sink, alert events for incident transitions and updates,
  re-notification and the node heartbeat, the control socket, the HTTP listener (``/metrics``,
  ``/healthz``, readiness), the gates' report listener and decisions, and sd_notify.
  ``run(stop)`` runs the loop until ``stop`` is set; ``close()`` stops everything.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm_guardian.clock import SystemClock
from vllm_guardian.config.schema import Config
from vllm_guardian.surface.control_socket import ControlSocket
from vllm_guardian.loop.assemble import assemble
from vllm_guardian.loop.daemon import Daemon
from vllm_guardian.config.status import ReloadBook, ReloadOutcome
from vllm_guardian.loop.reload import apply_config
from vllm_guardian.errors import ConfigError, GuardianError
from vllm_guardian.host.accel import AccelBackend
from vllm_guardian.surface.exporter import build_registry
from vllm_guardian.host.api_keys import ApiKeys, BearerHttpClient
from vllm_guardian.host.http import StdlibHttpClient
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.process_details import PsutilDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.surface.http_listener import HttpListener, LastTick
from vllm_guardian.model import Incident, Status, Transition
from vllm_guardian.netaddr import parse_hostport
from vllm_guardian.probes.accel import make_backends
from vllm_guardian.surface.sdnotify import SdNotify
from vllm_guardian.surface.status_view import StatusSources
from vllm_guardian.surface.kube_publisher import KubePublisher, supervised_namespaces
from vllm_guardian.seams import Seams
from vllm_guardian.sinks.events import AlertEmitter, IncidentAlerts
from vllm_guardian.sinks.fleet import node_summary
from vllm_guardian.sinks.gate_decisions import GateDecisions
from vllm_guardian.sinks.redis_conn import RedisConnection
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.gates.listener import ReportsListener
from vllm_guardian.gates.trust import Keys, load_keys

if TYPE_CHECKING:
    pass

log = logging.getLogger("guardian")


def real_seams(cfg: Config, clock: SystemClock | None = None) -> Seams:
    """The machine itself. NVML / npu-smi are touched here, at start, never at import."""
    proc = ProcFS(cfg.probes.procfs.proc_root)
    commands = SubprocessRunner()
    details = PsutilDetails() if os.path.realpath(cfg.probes.procfs.proc_root) == "/proc" else None
    http = BearerHttpClient(StdlibHttpClient(), ApiKeys(cfg, proc))  # servers started with --api-key
    return Seams(
        clock or SystemClock(),
        proc,
        http,
        commands,
        OsProcessControl(proc),
        make_backends(cfg.accelerators, commands, log),
        details,
    )


build_daemon = assemble  # the daemon and its parts, built by the assembler (``loop/assemble.py``)


def kube_publisher(cfg: Config, seams: Seams, clock: SystemClock) -> KubePublisher | None:
    """The readiness gate, Events and NodeCondition publisher, when a target names its pod's
    namespace and one of them is on, or the Node's taint is on; None (logged) when the Kubernetes
    API cannot be reached."""
    k = cfg.kubernetes
    pods = supervised_namespaces(cfg) and (k.readiness_gate or k.events or k.node_condition)
    if not (pods or k.taint_on_device_fault):
        return None
    from vllm_guardian.host.kube import KubeClient

    try:
        client = KubeClient.from_environment(dict(os.environ), k.kubeconfig, k.context, k.timeout)
    except GuardianError as e:
        log.warning("kubernetes readiness gate and Events off: %s", e)
        return None
    return KubePublisher(cfg, client, seams.proc, seams.control.alive, wall=clock.wall, monotonic=clock.monotonic)


@dataclass
class Runtime:
    daemon: Daemon
    clock: SystemClock
    redis: RedisConnection  # the one Redis connection every Redis user was handed
    sink: AlertSink
    alerts: IncidentAlerts
    emitter: AlertEmitter
    control: ControlSocket
    http: HttpListener | None
    loop_beat: LastTick
    sd: SdNotify = field(default_factory=SdNotify)
    _next_heartbeat: float = float("-inf")
    decisions: GateDecisions | None = None
    listener: ReportsListener | None = None
    kube: KubePublisher | None = None
    load_config: Callable[[], Config] | None = None  # re-reads the config file (SIGHUP); None: no reload
    reload_requested: threading.Event = field(default_factory=threading.Event)
    reloads: ReloadBook = field(default_factory=ReloadBook)

    @classmethod
    def start(
        cls,
        cfg: Config,
        *,
        accel_backends: Sequence[AccelBackend] | None = None,
        load_config: Callable[[], Config] | None = None,
    ) -> Runtime:
        """Everything wired and listening. ``accel_backends``: given, they replace the ones
        ``accelerators:`` asks for (the demo's fake NVML); None, the real ones. ``load_config``:
        re-reads the config file on a reload (None: no reload)."""
        keys = Keys()
        if cfg.gates.enabled:  # a bad trust key file is a config error before anything is started
            keys = load_keys(cfg.gates.trust.keys_file, cfg.gates.trust.key_env)
        clock = SystemClock()
        reloads = ReloadBook()
        node = cfg.node or os.uname().nodename  # parse_config fills it; a Config built by hand may not
        redis = RedisConnection.from_config(cfg.alerts, cfg.state_dir)  # the one connection, handed to all
        try:
            sink = AlertSink.on_connection(redis, cfg.alerts, cfg.state_dir, node)
        except BaseException:
            redis.close()
            raise
        emitter = AlertEmitter(node, cfg.alerts.renotify_interval)
        alerts = IncidentAlerts(emitter, sink.publish, clock)

        def republish(inc: Incident) -> None:  # an incident changed without a transition
            sink.publish(emitter.on_transition(Transition(inc, Status.FIRING), clock.wall(), clock.monotonic()))

        decisions = (
            GateDecisions(
                redis.client,
                cfg.gates.control_channel,
                cfg.node or "",
                lambda: cfg.detectors.output_corruption.mode,
                clock.wall,
                log.getChild("gates"),
                keys=keys,  # decisions out are signed with the gates' trust keys
            )
            if cfg.gates.enabled
            else None
        )
        seams = real_seams(cfg, clock)
        if accel_backends is not None:
            for b in seams.accel_backends:
                b.close()
            seams = dataclasses.replace(seams, accel_backends=tuple(accel_backends))
        kube = kube_publisher(cfg, seams, clock)
        # the listeners first (started below, once the daemon exists): they count what they drop,
        # a section of the daemon's status; they read the daemon only when asked
        control = ControlSocket(
            cfg.socket_path(),
            {
                "status": lambda req: daemon.status().to_dict(),  # the one place the status is serialised
                "ping": lambda req: "pong",
                "drain": lambda req: daemon.control_request(req),
                "restart": lambda req: daemon.control_request(req),
                "undrain": lambda req: daemon.control_request(req),
            },
        )
        beat = LastTick(clock.monotonic)
        http = None
        if cfg.api.http:
            http = HttpListener(
                parse_hostport(cfg.api.http),
                registry=build_registry(lambda: daemon.status(), lambda: daemon.stats),
                status=lambda: daemon.status(),
                tick_age=beat.age,
                max_tick_age=3 * cfg.interval,
            )
        daemon = build_daemon(
            cfg,
            seams,
            redis=redis,
            keys=keys,
            sinks=[alerts] + ([decisions] if decisions is not None else []),
            on_update=[republish],
            status_sources=StatusSources(
                alerts=sink, config=reloads, kubernetes=kube, control_socket=control, http_listener=http
            ),
        )
        gates = daemon.readings.gates
        listener = (  # external reports about this node's instances (started with the rest below)
            ReportsListener(
                redis.client,
                cfg.gates.reports_channel,
                gates.accept_report,
                clock.monotonic,
                clock.wall,
                log.getChild("gates"),
            )
            if gates is not None
            else None
        )
        rt = cls(
            daemon,
            clock,
            redis,
            sink,
            alerts,
            emitter,
            control,
            http,
            beat,
            decisions=decisions,
            listener=listener,
            kube=kube,
            load_config=load_config,
            reloads=reloads,
        )
        try:
            if listener is not None:
                listener.start()
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

    def request_reload(self) -> None:
        """From a signal handler: the loop reloads after its current tick."""
        self.reload_requested.set()
        self.clock.wake()

    def reload(self) -> ReloadOutcome:
        """Re-read the config; apply it when valid (``loop.reload``), else keep the old one and
        say why (the key path of each problem). Incidents, episodes, the restart ledger and what
        the tracker knows are kept either way. The outcome is in ``guardian status`` (``config``)."""
        self.reload_requested.clear()
        at = self.clock.wall()
        if self.load_config is None:
            outcome = ReloadOutcome(at, False, "no config file to re-read")
        else:
            try:
                new = self.load_config()
            except ConfigError as e:
                msg = "; ".join(e.problems)
                log.error("config reload refused, the running config is kept: %s", msg)
                outcome = ReloadOutcome(at, False, f"refused, the running config is kept: {msg}")
            else:
                with self.daemon._lock:
                    res = apply_config(self.daemon, new)
                for tr in res.transitions:
                    self.daemon._emit(tr)
                log.info("config reloaded: %s", res.summary())
                outcome = ReloadOutcome(at, True, res.summary(), tuple(res.needs_restart))
        self.reloads.record(outcome)
        return outcome

    def after_tick(self) -> None:
        """The systemd watchdog and ``/healthz`` are fed by the loop itself (a frozen loop
        stops them); firing incidents are re-notified and, a few times per heartbeat TTL, the
        node heartbeat is written (both only enqueue: the sink's thread talks to Redis)."""
        self.loop_beat.beat()
        if self.reload_requested.is_set():
            self.reload()
        self.alerts.renotify(self.daemon.incidents.open_incidents())
        now = self.clock.monotonic()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.daemon.cfg.alerts.heartbeat_ttl / 3
            self.sink.heartbeat(node_summary(self.daemon.status(), self.sink.status_section()))
        if self.kube is not None:
            self.kube.observe(self.daemon.status())  # only queues: its thread talks to the API server
        self.sd.after_tick(f"{len(self.daemon.tracker.targets)} targets")

    def close(self) -> None:
        self.control.stop()
        if self.kube is not None:
            self.kube.close()
        if self.http is not None:
            self.http.stop()
        self.daemon.runner.shutdown()
        if self.listener is not None:
            self.listener.stop()
        if self.decisions is not None:
            self.decisions.close()
        self.sink.close()
        self.redis.close()  # after every user of it stopped

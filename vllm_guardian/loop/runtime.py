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
  ``/healthz``, readiness; TLS and basic auth from its web config, re-read on a reload and when
  one of its files changes), the gates' report listener and decisions, the trust keys in force
  (``KeyRing``, re-read on a reload) and, with keys, the listener that checks every message on
  the control channel (``gates/control.py``), and sd_notify.
  ``run(stop)`` runs the loop until ``stop`` is set; ``close()`` stops everything.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_guardian.clock import SystemClock
from vllm_guardian.config.schema import Config
from vllm_guardian.surface.control_socket import ControlSocket
from vllm_guardian.loop.assemble import assemble, kube_client, known_secrets, targets_need_kube
from vllm_guardian.loop.daemon import Daemon
from vllm_guardian.config.status import ReloadBook, ReloadOutcome
from vllm_guardian.loop.reload import apply_config
from vllm_guardian.errors import ConfigError, GuardianError
from vllm_guardian.host.accel import AccelBackend
from vllm_guardian.surface.exporter import build_registry
from vllm_guardian.host.api_keys import ApiKeys, BearerHttpClient, read_key_file
from vllm_guardian.host.http import StdlibHttpClient
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.process_details import PsutilDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.host.server_files import ServerFiles
from vllm_guardian.surface.http_listener import HttpListener, LastTick, healthz_answer
from vllm_guardian.surface.http_stats import HttpCounters
from vllm_guardian.surface.web_security import WebSecurity
from vllm_guardian.model import Incident, Status, Transition
from vllm_guardian.netaddr import parse_hostport
from vllm_guardian.probes.accel import make_backends
from vllm_guardian.surface.logs import scrub_log_lines
from vllm_guardian.surface.sdnotify import SdNotify
from vllm_guardian.surface.status_view import StatusSources
from vllm_guardian.surface.kube_publisher import KubePublisher, supervised_namespaces
from vllm_guardian.seams import Seams
from vllm_guardian.sinks.events import AlertEmitter, IncidentAlerts
from vllm_guardian.surface.heartbeat import node_summary
from vllm_guardian.sinks.gate_decisions import GateDecisions
from vllm_guardian.sinks.redis_conn import RedisConnection
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerSink
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.gates.control import ControlChannel
from vllm_guardian.gates.listener import ReportsListener
from vllm_guardian.gates.trust import KeyRing

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient

log = logging.getLogger("guardian")
WEB_CONFIG_WATCH = 5.0  # seconds between looks at the web config's files (a rotated certificate)


def real_seams(cfg: Config, clock: SystemClock | None = None) -> Seams:
    """The machine itself. NVML / npu-smi are touched here, at start, never at import."""
    proc = ProcFS(cfg.probes.procfs.proc_root)
    commands = SubprocessRunner()
    details = PsutilDetails() if os.path.realpath(cfg.probes.procfs.proc_root) == "/proc" else None
    files = ServerFiles(log)  # server logs, pid and key files: opened safely, refusals counted
    keys = ApiKeys(cfg, proc, read_file=partial(read_key_file, opener=files.reader("api_key_file")))
    http = BearerHttpClient(StdlibHttpClient(), keys)  # servers started with --api-key
    return Seams(
        clock or SystemClock(),
        proc,
        http,
        commands,
        OsProcessControl(proc, files),
        make_backends(cfg.accelerators, commands, log),
        details,
        files,
    )


build_daemon = assemble  # the daemon and its parts, built by the assembler (``loop/assemble.py``)


def publisher_wanted(cfg: Config) -> bool:
    """Is the readiness gate, an Event or the NodeCondition wanted for a supervised pod, or the
    Node's taint?"""
    k = cfg.kubernetes
    pods = bool(supervised_namespaces(cfg)) and (k.readiness_gate or k.events or k.node_condition)
    return pods or k.taint_on_device_fault


def kube_publisher(
    cfg: Config, seams: Seams, clock: SystemClock, client: KubeClient | None = None
) -> KubePublisher | None:
    """The readiness gate, Events and NodeCondition publisher, when a target names its pod's
    namespace and one of them is on, or the Node's taint is on, on ``client`` (default: one from
    the environment); None (logged) when the Kubernetes API cannot be reached."""
    if not publisher_wanted(cfg):
        return None
    if client is None:
        from vllm_guardian.host.kube import KubeClient

        k = cfg.kubernetes
        try:
            client = KubeClient.from_environment(
                dict(os.environ), k.kubeconfig, k.context, k.timeout, k.plain_http_loopback
            )
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
    keys: KeyRing = field(default_factory=KeyRing.fixed)  # the trust keys in force (re-read on a reload)
    control_listener: ReportsListener | None = None  # checks the control channel (with keys)
    kube: KubePublisher | None = None
    load_config: Callable[[], Config] | None = None  # re-reads the config file (SIGHUP); None: no reload
    reload_requested: threading.Event = field(default_factory=threading.Event)
    reloads: ReloadBook = field(default_factory=ReloadBook)
    _next_web_watch: float = float("-inf")
    alertmanager: AlertmanagerSink | None = None  # the direct push (alerts.alertmanager.urls), if any

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
        # a bad trust key file is a config error before anything is started
        keys = KeyRing(cfg.gates.trust.keys_file, cfg.gates.trust.key_env)
        web = None  # likewise a bad web config: nothing is ever served unprotected
        if cfg.api.http and cfg.api.web_config_file:
            web = WebSecurity(cfg.api.web_config_file, log.getChild("http"))
        http_counters = HttpCounters(log.getChild("http"), web) if cfg.api.http else None
        clock = SystemClock()
        reloads = ReloadBook()
        node = cfg.node or os.uname().nodename  # parse_config fills it; a Config built by hand may not
        control_channel = ControlChannel(node, keys, cfg.gates.trust, log, clock.wall, started=clock.wall())
        if keys.enabled:
            log.info(
                "trust keys from %s (kids %s): control messages are signed and checked",
                keys.current.source,
                ", ".join(keys.current.kids),
            )
        redis = RedisConnection.from_config(cfg.alerts, cfg.state_dir)  # the one connection, handed to all
        try:
            sink = AlertSink.on_connection(redis, cfg.alerts, cfg.state_dir, node)
        except BaseException:
            redis.close()
            raise
        am = AlertmanagerSink.from_config(cfg.alerts, cfg.state_dir)
        seams = real_seams(cfg, clock)
        if accel_backends is not None:
            for b in seams.accel_backends:
                b.close()
            seams = dataclasses.replace(seams, accel_backends=tuple(accel_backends))
        # one Kubernetes client for the publisher, matching, restarts and forensics
        client = kube_client(cfg, targets_need_kube(cfg) or publisher_wanted(cfg))
        known = known_secrets(seams, redis, keys, client)  # the secret values it holds, out of what it writes
        scrub_log_lines(known.scrub)
        emitter = AlertEmitter(node, cfg.alerts.renotify_interval)

        def publish(event: Mapping[str, Any]) -> None:
            sink.publish(event)
            if am is not None:
                am.publish(event)

        alerts = IncidentAlerts(emitter, publish, clock, prepare=known.scrub_doc)

        def republish(inc: Incident) -> None:  # an incident changed without a transition
            alerts.publish(emitter.on_transition(Transition(inc, Status.FIRING), clock.wall(), clock.monotonic()))

        decisions = (
            GateDecisions(
                redis.client,
                cfg.gates.control_channel,
                cfg.node or "",
                clock.wall,
                log.getChild("gates"),
                keys=keys,  # decisions out are signed with the gates' trust keys
            )
            if cfg.gates.enabled
            else None
        )
        kube = kube_publisher(cfg, seams, clock, client) if client is not None else None
        # the listeners first (started below, once the daemon exists): they count what they drop,
        # a section of the daemon's status; they read the daemon only when asked
        beat = LastTick(clock.monotonic)
        max_tick_age = 3 * cfg.interval
        control = ControlSocket(
            cfg.socket_path(),
            {
                "status": lambda req: daemon.status().to_dict(),  # the one place the status is serialised
                "ping": lambda req: "pong",
                "healthz": lambda req: healthz_answer(beat.age(), max_tick_age)[1],  # /healthz, for `guardian healthz`
                "drain": lambda req: daemon.control_request(req),
                "restart": lambda req: daemon.control_request(req),
                "undrain": lambda req: daemon.control_request(req),
            },
        )
        http = None
        if cfg.api.http:
            http = HttpListener(
                parse_hostport(cfg.api.http),
                registry=build_registry(lambda: daemon.status(), lambda: daemon.stats),
                status=lambda: daemon.status(),
                tick_age=beat.age,
                max_tick_age=max_tick_age,
                log=log.getChild("http"),
                security=web,
                counters=http_counters,
            )
        daemon = build_daemon(
            cfg,
            seams,
            redis=redis,
            keys=keys,
            kube=client,
            kube_from_environment=False,
            scrub=known,
            control=control_channel,
            sinks=[alerts] + ([decisions] if decisions is not None else []),
            on_update=[republish],
            on_decision=[decisions.decided] if decisions is not None else [],
            status_sources=StatusSources(
                alerts=sink,
                alertmanager=am,
                config=reloads,
                kubernetes=kube,
                http=http_counters,
                trust=control_channel,
                control_socket=control,
                http_listener=http,
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
        control_listener = (  # every message on the control channel, checked and counted (never acted on)
            ReportsListener(
                redis.client,
                cfg.alerts.control_channel,
                control_channel.accept,
                clock.monotonic,
                clock.wall,
                log.getChild("control"),
                what="control messages",
            )
            if keys.enabled
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
            keys=keys,
            control_listener=control_listener,
            kube=kube,
            load_config=load_config,
            reloads=reloads,
            alertmanager=am,
        )
        try:
            for each in (listener, control_listener):
                if each is not None:
                    each.start()
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
        the tracker knows are kept either way. The trust keys are re-read from their source
        either way (a key removed from the file stops verifying at once; one that no longer loads
        keeps the keys in force, and the outcome is not ok). The outcome is in ``guardian status``
        (``config``; the key ids in ``trust``)."""
        self.reload_requested.clear()
        if self.http is not None and self.http.security is not None:
            self.http.security.reload()  # its own file: re-read whatever becomes of the config's
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
        if self.keys.keys_file or self.keys.key_env:
            keys = self.keys.reload()
            (log.info if keys.ok else log.error)("%s", keys.summary())
            message = f"{outcome.message}; {keys.summary()}"
            outcome = dataclasses.replace(outcome, ok=outcome.ok and keys.ok, message=message)
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
        if self.alertmanager is not None and self.alertmanager.resend_due():
            self.alertmanager.resend(self.alerts.current(self.daemon.incidents.open_incidents()))
        now = self.clock.monotonic()
        web = self.http.security if self.http is not None else None
        if web is not None and now >= self._next_web_watch:
            self._next_web_watch = now + WEB_CONFIG_WATCH
            web.reload_if_changed()  # a rotated certificate, an updated Secret: no signal needed
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
        for each in (self.listener, self.control_listener):
            if each is not None:
                each.stop()
        if self.decisions is not None:
            self.decisions.close()
        self.sink.close()
        if self.alertmanager is not None:
            self.alertmanager.close()
        self.redis.close()  # after every user of it stopped

"""The remediation state machine on a fake clock and a fake kernel: one configured target ``llm``
(API server, EngineCore, worker) restarted by command, a runner that finishes jobs on the next tick,
and the incident manager, ledger and tracker the remediator reads. ``step`` ticks it."""

from __future__ import annotations

import logging
from dataclasses import replace


from vllm_guardian.remediation.methods import build_methods
from vllm_guardian.remediation.parts import RemediationParts
from vllm_guardian.remediation.remediator import Remediator
from vllm_guardian.remediation.settings import RemediationSettings
from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.incidents import IncidentManager, IncidentStore
from vllm_guardian.model import Finding, Kind, ProcessInfo, ProcKey, Role, Severity, Target, TargetRef
from vllm_guardian.remediation.policy import RestartLedger
from vllm_guardian.state.async_runner import Done
from vllm_guardian.series import SeriesStore
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_runner import FakeRunner
from vllm_guardian.state.tracker import Tracker


API, ENGINE, WORKER = ProcKey(100, 1), ProcKey(101, 2), ProcKey(102, 3)


NEW_API = ProcKey(300, 50)


ARGV = ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]


class SyncRunner:
    """Runs submitted jobs at once; their results come back on the next tick, like AsyncRunner."""

    def __init__(self):
        self.done = []

    def submit(self, key, fn, deadline, on_done=None):
        try:
            outcome = Done(key, fn())
        except Exception as e:  # noqa: BLE001 - the real runner hands errors back too
            outcome = Done(key, None, e)
        self.done.append(replace(outcome, on_done=on_done))
        return True

    def deliver(self, now):
        done, self.done = self.done, []
        for d in done:
            if d.on_done is not None:
                d.on_done(d, now)


def target(key=API, procs=(API, ENGINE, WORKER)):
    roles = {API: Role.API_SERVER, ENGINE: Role.ENGINE_CORE, WORKER: Role.WORKER}
    return Target(
        "llm",
        key,
        tuple(ProcessInfo(k, 1, roles.get(k, Role.API_SERVER), ("x",)) for k in procs),
        8000,
        "http://127.0.0.1:8000",
        "config",
    )


class World:
    def __init__(self, tmp_path, restart=None, policy=None, detectors=None, control=None, runner=None):
        raw = {
            "node": "n1",
            "state_dir": str(tmp_path),
            "api": {"http": None},
            "targets": [
                {
                    "name": "llm",
                    "match": {"port": 8000},
                    "restart": restart
                    or {
                        "mode": "command",
                        "command": ARGV,
                        "stop_timeout": 10,
                        "hang_stop_grace": 3,  # the timelines below were written for a 3 s grace
                        "ready_timeout": 60,
                        "owner_grace": 0,
                    },
                    "drain": {"timeout": 30},
                }
            ],
        }
        if policy:
            raw["policy"] = policy
        if detectors:
            raw["detectors"] = detectors
        self.cfg = parse_config(raw)
        self.clock = FakeClock()
        self.control = control or FakeControl({API, ENGINE, WORKER}, term_takes_down={API: {ENGINE, WORKER}})
        self.runner = SyncRunner()
        self.cmd = runner or FakeRunner()
        self.incidents = IncidentManager("n1", self.clock, IncidentStore(str(tmp_path)), self.cfg.detectors)
        self.ledger = RestartLedger(str(tmp_path))
        self.tracker = Tracker(600)
        self.tracker.apply_discovery((target(),), (), self.clock.monotonic())
        self.tracker.canary_finished("llm", API, True, "m", self.clock.monotonic())
        self.series = SeriesStore()
        self.published = []
        self.holding: set[str] = set()  # targets whose evidence is still being captured
        self.rem = self.new_remediator()

    def new_remediator(
        self,
        *,
        lease=None,
        kube=None,
        procfs=None,
        device_check=None,
        pre_restart_check=None,
        fleet_client=None,
        workarounds=None,
        http=None,
        **settings,
    ):
        """A remediator on this world's state dir (a second one: the guardian restarted);
        ``pre_restart_check`` and ``fleet_client``: the device check and the breaker's Redis."""
        rs = replace(RemediationSettings.from_config(self.cfg), **settings)
        return Remediator(
            RemediationParts(
                rs,
                self.clock,
                self.control,
                self.runner,
                self.cmd,
                self.incidents,
                self.ledger,
                procfs,
                build_methods(rs.units()),
                logging.getLogger("test.remediation"),
                lease=lease,
                kube=kube,
                publish_control=self.published.append,
                device_check=device_check or (lambda target: None),
                http=http,
                pre_restart_check=pre_restart_check,
                fleet_client=fleet_client,
                workarounds=workarounds or {},
            )
        )

    def open(self, kind=Kind.BUSY_LOOP):
        ref = TargetRef("llm", API.pid, API.starttime, 8000, "m", "engine_core")
        f = Finding(kind, "llm", Severity.CRITICAL, "spins", {"pid": ENGINE.pid})
        for _ in range(5):  # as many consecutive findings as the kind's open_after asks
            if opened := self.incidents.update("llm", ref, {kind: f}):
                return opened[0].incident
        raise AssertionError(f"{kind} never opened")

    def consider(self, inc, kind_mode="remediate", tripped=1, total=1):
        return self.rem.consider(
            inc, self.tracker.targets["llm"], self.clock.monotonic(), mode=Mode(kind_mode), tripped=tripped, total=total
        ).text

    def step(self, seconds=1.0, n=1):
        for _ in range(n):
            self.clock.advance(seconds)
            self.runner.deliver(self.clock.monotonic())
            self.rem.tick(self.clock.monotonic(), self.tracker, self.series, self.holding)

    def new_server_comes_up(self):
        self.tracker.apply_discovery((target(NEW_API, (NEW_API,)),), (), self.clock.monotonic())
        self.tracker.canary_finished("llm", NEW_API, True, "m", self.clock.monotonic())

    def actions(self, inc):
        return [(a.name, a.status) for a in self.incident(inc.id).actions]

    def incident(self, incident_id):
        inc = self.incidents.get(incident_id)
        assert inc is not None, f"incident {incident_id} is not known"
        return inc

"""One gates probe over tracked targets, rounds run synchronously as the pool would run them.

The main target is ``NAME`` on ``url`` (autodiscovered, or ``source="config"``); ``peers`` are
other servers on the same node (name -> (url, source)), rounded before it so that it is judged
against their latest answers (L4 on this node). Real seams: the clock and HTTP.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from vllm_guardian.clock import SystemClock
from vllm_guardian.config.schema import Config, DiagnosticPromptConfig, GatesConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import output_corruption
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.gates.exchange import PeerFingerprints, RedisHashes
from vllm_guardian.gates.shared import GatesShared
from vllm_guardian.host.http import HttpClient, StdlibHttpClient
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.loop.assemble import gates_shared
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target
from vllm_guardian.probes.base import ProbeParts, Readings, Seen
from vllm_guardian.probes.gates import make
from vllm_guardian.seams import Seams
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.surface.status_codec import plain

NAME = "sim"
KEY = ProcKey(4242, 1)
DIAG = (DiagnosticPromptConfig("1+1=", r"^\s*2", 4), DiagnosticPromptConfig("2+2=", "baseline", 4))


def _target(name: str, key: ProcKey, url: str, source: str) -> Target:
    api = ProcessInfo(key, 1, Role.API_SERVER, ("python", "-m", "sim"))
    return Target(name, key, (api,), port=0, api_url=url, source=source)


class World:
    """One gates probe over ``NAME`` (and its ``peers`` on the node)."""

    def __init__(
        self,
        url: str,
        tmp_path,
        http: HttpClient | None = None,
        exchange: PeerFingerprints | None = None,
        redis: RedisHashes | None = None,
        source: str = "autodiscover",
        peers: Mapping[str, tuple[str, str]] | None = None,
        **gates,
    ) -> None:
        """``exchange``: handed to the gates' shared state; else the assembler's ``gates_shared``
        builds one on ``redis``."""
        g: dict[str, Any] = dict(enabled=True, interval=1.0, diagnostics=DIAG)
        g.update(gates)
        self.cfg = Config(node="n1", state_dir=str(tmp_path), gates=GatesConfig(**g), detectors=DetectorsConfig())
        self.tracker = Tracker(600.0)
        targets = [_target(NAME, KEY, url, source)]
        targets += [
            _target(name, ProcKey(KEY.pid + 1 + i, 1), purl, psource)
            for i, (name, (purl, psource)) in enumerate((peers or {}).items())
        ]
        self.tracker.apply_discovery(tuple(targets), (), 0.0)
        for t in targets:
            self.tracker.canary_finished(t.name, t.key, True, None, 0.0)
        shared = gates_shared(self.cfg, None, redis, time.time, logging.getLogger("t"), exchange=exchange)
        self.readings = Readings(gates=shared)
        proc = ProcFS("/proc")  # real seams; the gates probe only uses the clock and HTTP
        seams = Seams(SystemClock(), proc, http or StdlibHttpClient(), SubprocessRunner(), OsProcessControl(proc))
        parts = ProbeParts(self.cfg, seams, self.tracker, SeriesStore(), self.readings, logging.getLogger("t"))
        probe = make(parts)
        assert probe is not None
        self.probe = probe
        self.now = 0.0

    def round(self):
        """One round of every target (``NAME`` last); ``NAME``'s gates."""
        self.now += self.cfg.gates.interval
        jobs = sorted(self.probe.jobs(self.now, Seen()), key=lambda j: j.subject == NAME)
        assert jobs and jobs[-1].subject == NAME
        for job in jobs:
            assert job.on_start is not None
            job.on_start(self.now)
            self.probe.fold(job.run(), self.now)
        return self.shared.targets[NAME]

    @property
    def shared(self) -> GatesShared:
        assert self.readings.gates is not None
        return self.readings.gates

    def tick(self, dt: float) -> bool:
        """``dt`` seconds later: runs the round due then, if one is; whether one ran."""
        self.now += dt
        jobs = list(self.probe.jobs(self.now, Seen()))
        for job in jobs:
            assert job.on_start is not None
            job.on_start(self.now)
            self.probe.fold(job.run(), self.now)
        return bool(jobs)

    def finding(self, name: str = NAME):
        view = TargetView(self.tracker.state(name, self.now), SeriesStore(), self.shared.view(name))
        return output_corruption.evaluate(view, self.cfg.detectors)

    def status(self, name: str = NAME):
        """The target's gates section as the status document shows it."""
        return plain(
            self.shared.status_of(name, self.now, self.cfg.detectors.output_corruption, output_corruption.health_score)
        )

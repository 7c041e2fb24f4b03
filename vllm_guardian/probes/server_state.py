"""The server_state probe: is the server paused or asleep on purpose?

Asks ``GET /is_paused`` (``{"is_paused": bool}``) and ``GET /is_sleeping``
(``{"is_sleeping": bool}``) of every ready target, off the loop thread, every
``probes.vllm_http.interval``. vLLM registers them only with ``VLLM_SERVER_DEV_MODE=1``
(RL trainers pause generation while they sync weights): an incarnation that answers 404 on
both is not asked again until it restarts. Both calls reach the engine, so a hung engine
answers neither: no answer (a timeout, 5xx, a body that says nothing) is "not known", never
"paused": a hang is judged as usual. ``lifecycle.server_state: off`` turns it off.

vLLM 0.32's ``/is_sleeping`` is true for a pause too (a pause is its level-0 sleep), and a sleep
pauses the scheduler: both answer true either way. What tells them apart is the engine's
``vllm:engine_sleep_state{sleep_state="awake"}`` gauge (0 only while asleep at level 1 or 2),
read from the last ``/metrics`` page: both true and ``awake`` 0 is asleep, else paused.

The fold hands the answer to the tracker (``Tracker.server_state``), which keeps the hold
(``paused`` / ``sleeping``), since when, and when it ended (the resume grace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Callable

from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.model import ProcKey
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Schedule, Seen

_AWAKE = re.compile(r'^vllm:engine_sleep_state\{[^}]*sleep_state="awake"[^}]*\}\s+(\S+)', re.M)
ENDPOINTS = (("paused", "/is_paused", "is_paused"), ("sleeping", "/is_sleeping", "is_sleeping"))


@dataclass(frozen=True)
class ServerState:
    target: str
    key: ProcKey
    paused: bool | None  # None: not known (no answer, not exposed)
    sleeping: bool | None
    exposed: bool  # at least one of the endpoints exists (not a 404 on both)


def asleep_by_metrics(page: str | None) -> bool:
    """The /metrics page says an engine is asleep (``awake`` 0): vLLM's sleep, not a mere pause."""
    for raw in _AWAKE.findall(page or ""):
        try:
            if float(raw) == 0.0:
                return True
        except ValueError:
            continue
    return False


def held_as(paused: bool | None, sleeping: bool | None, page: str | None) -> tuple[bool | None, bool | None]:
    """``(paused, sleeping)`` as the tracker should hold them: when the server says both, the
    /metrics page decides (asleep only when an engine reports ``awake`` 0)."""
    if paused and sleeping:
        return (False, True) if asleep_by_metrics(page) else (True, False)
    return paused, sleeping


def ask(http: HttpClient, base: str, path: str, field: str, timeout: float) -> tuple[bool | None, bool]:
    """``(answer, exposed)`` of one endpoint: the boolean it says, and whether it exists."""
    try:
        r = http.request("GET", base + path, timeout)
    except HttpError:
        return None, True  # no answer: a hung engine, not proof that the endpoint is absent
    if r.status == 404:
        return None, False
    if r.status != 200:
        return None, True
    try:
        value = r.json()[field]
    except (ValueError, KeyError, TypeError):
        return None, True
    return (value if isinstance(value, bool) else None), True


def read_state(http: HttpClient, target: str, key: ProcKey, api_url: str, timeout: float) -> ServerState:
    base = api_url.rstrip("/")
    answers = {name: ask(http, base, path, field, timeout) for name, path, field in ENDPOINTS}
    exposed = any(e for _, e in answers.values())
    return ServerState(target, key, answers["paused"][0], answers["sleeping"][0], exposed)


class ServerStateProbe:
    name = "server_state"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.timeout = parts.cfg.probes.vllm_http.timeout
        self.http = parts.seams.http
        self.tracker = parts.tracker
        self.log = parts.log
        self._schedule = Schedule(parts.cfg.probes.vllm_http.interval)
        self._absent: set[ProcKey] = set()  # incarnations that expose neither endpoint

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        out = []
        for tr in self.tracker.targets.values():
            url, key = tr.target.api_url, tr.target.key
            if (
                url
                and tr.api_alive
                and tr.ready
                and not tr.grpc
                and key not in self._absent
                and self._schedule.due(tr.name, now)
            ):
                out.append(
                    Job(tr.name, self._job(tr.name, key, url), 2 * self.timeout + 1, partial(self._ran, tr.name))
                )
        return out

    def _ran(self, name: str, now: float) -> None:
        self._schedule.ran(name, now)

    def _job(self, name: str, key: ProcKey, url: str) -> Callable[[], ServerState]:
        return lambda: read_state(self.http, name, key, url, self.timeout)

    def fold(self, res: ServerState, now: float) -> Folded:
        if not res.exposed:
            self._absent.add(res.key)
        tr = self.tracker.targets.get(res.target)
        page = tr.last_scrape.page if tr is not None and tr.last_scrape is not None else None
        paused, sleeping = held_as(res.paused, res.sleeping, page)
        change = self.tracker.server_state(res.target, res.key, paused, sleeping, now)
        if change:
            self.log.info("target %s: %s", res.target, change)
        return Folded()

    def close(self) -> None:
        pass


def make(parts: ProbeParts) -> ServerStateProbe | None:
    return ServerStateProbe(parts) if parts.cfg.lifecycle.server_state != "off" else None

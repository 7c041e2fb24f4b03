"""The vllm_state probe: the server's version and vLLM's own states, as the server says them.

Off the loop thread, every ``probes.vllm_http.interval``, for every target whose API server lives:

- ``GET /version`` once per incarnation (``{"version": "0.34.0"}``) picks the capability row
  (``vllm_versions.py``); on a row with elastic EP it is asked again each time, because
  the elastic-EP middleware answers a retired rank's every path but ``/health`` with 503 and its
  own "retired" text (``is_retired_answer``): ``/version`` is the cheapest such path;
- the row's ``/checkpoint/status`` (0.34 with ``--enable-sleep-mode``): its state, believed only
  with the status code vLLM gives it (503 running / preparing / restoring, 200 prepared, 500
  failed: the 503 while running is vLLM's "nothing captured", never an unhealthy answer);
- the row's fault-tolerance status (``--enable-fault-tolerance``): each engine's status.

A 404 marks a path not offered by this incarnation: it is not asked again until it restarts. No
answer, a 5xx other than vLLM's own, or a body that says nothing known is "not known", never a
state: a hang is judged as usual. The fold hands the reading to the tracker
(``Tracker.vllm_state``). ``lifecycle.server_state: off`` turns it off with the server_state probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from vllm_guardian import vllm_versions as vv
from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.model import ProcKey
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Schedule, Seen
from vllm_guardian.state.vllm_states import VllmAnswers

MAX_VERSION_LEN = 64  # a version longer than this is not one


@dataclass(frozen=True)
class Asked:
    """What to ask this time (the paths an incarnation has not answered 404 to)."""

    version: bool
    checkpoint: str | None
    fault_tolerance: str | None


def _get(http: HttpClient, url: str, timeout: float) -> tuple[int, Any] | None:
    """``(status, JSON body or None)``; None when nothing answered."""
    try:
        r = http.request("GET", url, timeout)
    except HttpError:
        return None
    try:
        body = r.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    return r.status, body


def version_of(body: Any) -> str | None:
    v = body.get("version") if isinstance(body, dict) else None
    return v if isinstance(v, str) and 0 < len(v) <= MAX_VERSION_LEN and v.isprintable() else None


def read_answers(
    http: HttpClient, target: str, key: ProcKey, api_url: str, asked: Asked, timeout: float
) -> VllmAnswers:
    base = api_url.rstrip("/")
    out: dict[str, Any] = {}
    got = _get(http, base + "/version", timeout) if asked.version else None
    if got is not None:
        code, body = got
        out["retired"] = vv.is_retired_answer(code, body)
        if code in (200, 404) and not out["retired"]:
            out["version"], out["version_read"] = (version_of(body) if code == 200 else None), True
    if asked.checkpoint and not out.get("retired"):
        got = _get(http, base + asked.checkpoint, timeout)
        if got is not None and got[0] == 404:
            out["checkpoint_absent"] = True
        elif got is not None and vv.checkpoint_phase(*got) is not None:
            out["checkpoint"] = got[1]["state"]
    if asked.fault_tolerance and not out.get("retired"):
        got = _get(http, base + asked.fault_tolerance, timeout)
        if got is not None and got[0] == 404:
            out["ft_absent"] = True
        elif got is not None and got[0] == 200:
            out["engines"] = engine_states(got[1])
    return VllmAnswers(target, key, **out)


def engine_states(body: Any, *, max_engines: int = 1024) -> dict[int, str]:
    """Engine index -> vLLM's status word, for the entries ``fault_tolerance_phases`` accepts."""
    known = vv.fault_tolerance_phases(body, max_engines=max_engines)
    engines = body.get("engines", []) if isinstance(body, dict) else []
    return {e["id"]: e["status"].lower() for e in engines[:max_engines] if isinstance(e, dict) and e.get("id") in known}


@dataclass
class _Seen:
    """Per incarnation: read its version yet, paths it answered 404 to."""

    version_read: bool = False
    absent: set[str] = field(default_factory=set)


class VllmStateProbe:
    name = "vllm_state"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.timeout = parts.cfg.probes.vllm_http.timeout
        self.http = parts.seams.http
        self.tracker = parts.tracker
        self.log = parts.log
        self._schedule = Schedule(parts.cfg.probes.vllm_http.interval)
        self._seen: dict[ProcKey, _Seen] = {}

    def _asked(self, key: ProcKey) -> Asked:
        seen = self._seen.setdefault(key, _Seen())
        facts = self.tracker.vllm_facts(key)
        row = (facts.match if facts is not None else vv.capabilities_for(None)).row
        version = not seen.version_read or row.elastic_ep_retire
        cp = row.checkpoint_status_path if seen.version_read else None
        ft = row.fault_tolerance_status_path if seen.version_read else None
        return Asked(version, None if cp in seen.absent else cp, None if ft in seen.absent else ft)

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        out = []
        live = set()
        for tr in self.tracker.targets.values():
            url, key = tr.target.api_url, tr.target.key
            live.add(key)
            if url and tr.api_alive and not tr.grpc and self._schedule.due(tr.name, now):
                run = self._job(tr.name, key, url, self._asked(key))
                out.append(Job(tr.name, run, 3 * self.timeout + 1, partial(self._ran, tr.name)))
        for key in set(self._seen) - live:
            del self._seen[key]
        return out

    def _ran(self, name: str, now: float) -> None:
        self._schedule.ran(name, now)

    def _job(self, name: str, key: ProcKey, url: str, asked: Asked) -> Callable[[], tuple[Asked, VllmAnswers]]:
        return lambda: (asked, read_answers(self.http, name, key, url, asked, self.timeout))

    def fold(self, res: tuple[Asked, VllmAnswers], now: float) -> Folded:
        asked, ans = res
        seen = self._seen.setdefault(ans.key, _Seen())
        seen.version_read = seen.version_read or ans.version_read
        if ans.checkpoint_absent and asked.checkpoint:
            seen.absent.add(asked.checkpoint)
        if ans.ft_absent and asked.fault_tolerance:
            seen.absent.add(asked.fault_tolerance)
        for change in self.tracker.vllm_state(ans, now):
            self.log.info("target %s: %s", ans.target, change)
        return Folded()

    def close(self) -> None:
        pass


def make(parts: ProbeParts) -> VllmStateProbe | None:
    return VllmStateProbe(parts) if parts.cfg.lifecycle.server_state != "off" else None

"""The canary probe: a one-token completion that proves the engine is making progress.

``POST /v1/completions`` with the served model (from config, else the first of
``GET /v1/models``), ``max_tokens`` 1, ``temperature`` 0 and a short timeout.
Used to confirm a suspect and as a slow periodic end-to-end check; the daemon
keeps at most one in flight per target. The probe also confirms a suspect: a target with an
unconfirmed finding gets a canary at the ``confirm_cooldown`` pace (at the periodic pace once
an incident of that kind is open: a hung engine queues every canary it is sent). A timeout is the hang signal; a fast
failure (HTTP 500, refused) is *not* a hang and is reported as such. A 401/403
(the server wants an API key the guardian does not have, or refuses the one it
sent) sets ``auth_status`` and the episode ``<target>:auth``, whatever the
readiness: until it is fixed no canary can ever confirm a hang. No canary is sent to a
server paused or asleep on purpose (it would queue behind the pause, or be refused).

On a data-parallel server (its ``/metrics`` page labels more than one engine) the canary names
the rank it is for in vLLM's ``X-data-parallel-rank`` header: the rank a suspect names (a hot
``EngineCore_DP<k>``, a rank frozen with work), else each rank in turn, each asked every
``interval`` (the periodic pace divided by the ranks). Left to the server, a
canary goes to the least-loaded rank, which is never the hung one (its stuck requests count
against it): a rank that spins or stalls while the other serves would never be asked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from vllm_guardian.config.schema import CanaryProbeConfig
from vllm_guardian.host.api_keys import AUTH_STATUSES, NO_KEY, describe_auth_failure
from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.model import ProcKey
from vllm_guardian.series import metrics as m
from vllm_guardian.state.readings import CanaryResult
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Seen

if TYPE_CHECKING:
    from vllm_guardian.state.tracker import TrackedTarget

WARMUP_RETRY = 2.0  # seconds between canaries while a target warms up (/health already 200)
RANK_HEADER = "X-data-parallel-rank"  # vLLM routes a request with it to that data-parallel rank


class AuthRefused(HttpError):
    """A /v1 endpoint answered 401/403; ``detail`` says where the key came from, never the key."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__("auth", detail)


def _auth_detail(http: HttpClient, url: str, status: int, path: str) -> str:
    source_for = getattr(http, "auth_source", None)  # a BearerHttpClient knows the key's origin
    return describe_auth_failure(status, path, source_for(url) if source_for else NO_KEY)


def served_model(http: HttpClient, api_url: str, timeout: float) -> str:
    url = api_url.rstrip("/") + "/v1/models"
    r = http.request("GET", url, timeout)
    if r.status in AUTH_STATUSES:
        raise AuthRefused(r.status, _auth_detail(http, url, r.status, "/v1/models"))
    if r.status != 200:
        raise HttpError("error", f"/v1/models answered HTTP {r.status}")
    try:
        return str(r.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise HttpError("error", f"/v1/models: unexpected body ({type(e).__name__})") from None


def run_canary(
    http: HttpClient,
    target: str,
    api_url: str,
    model: str | None,
    cfg: CanaryProbeConfig,
    now: Callable[[], float],
    dp_rank: int | None = None,
) -> CanaryResult:
    """One canary; ``dp_rank``: the data-parallel rank to send it to (vLLM's header)."""
    headers = {RANK_HEADER: str(dp_rank)} if dp_rank is not None else None
    res = _canary(http, target, api_url, model, cfg, now, headers)
    return res if dp_rank is None else replace(res, dp_rank=dp_rank)


def _canary(
    http: HttpClient,
    target: str,
    api_url: str,
    model: str | None,
    cfg: CanaryProbeConfig,
    now: Callable[[], float],
    headers: dict[str, str] | None,
) -> CanaryResult:
    started = now()
    try:
        if model is None:
            model = served_model(http, api_url, cfg.timeout)
        body = {"model": model, "prompt": cfg.prompt, "max_tokens": cfg.max_tokens, "temperature": 0}
        url = api_url.rstrip("/") + "/v1/completions"
        r = http.request("POST", url, cfg.timeout, body=body, headers=headers)
    except AuthRefused as e:
        return CanaryResult(target, started, now(), False, False, model, e.detail, e.status)
    except HttpError as e:
        return CanaryResult(target, started, now(), False, e.reason == "timeout", model, str(e))
    ended = now()
    if r.status in AUTH_STATUSES:
        return CanaryResult(
            target, started, ended, False, False, model, _auth_detail(http, url, r.status, "/v1/completions"), r.status
        )
    if r.status != 200:
        return CanaryResult(target, started, ended, False, False, model, f"HTTP {r.status}: {r.text[:200]}")
    try:
        choices = r.json()["choices"]
        if not isinstance(choices, list) or not choices:
            raise ValueError("no choices")
    except (ValueError, KeyError, TypeError) as e:
        return CanaryResult(target, started, ended, False, False, model, f"bad completion body: {e}")
    return CanaryResult(target, started, ended, True, False, model)


class CanaryProbe:
    name = "canary"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.cfg = parts.cfg.probes.canary
        self.http = parts.seams.http
        self.clock = parts.seams.clock
        self.tracker = parts.tracker
        self.series = parts.series
        self.log = parts.log
        self._turn: dict[str, int] = {}  # per target: the next rank of a data-parallel server to ask

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        return [
            self._job(tr, self._rank(tr, seen))
            for tr in self.tracker.targets.values()
            if tr.target.api_url and tr.api_alive and self._due(tr, now, seen)
        ]

    def _due(self, tr: TrackedTarget, now: float, seen: Seen) -> bool:
        if tr.hold is not None or tr.retired or tr.grpc:
            return False  # paused, asleep, checkpointing or retired on purpose: it would queue or be refused
        last = tr.last_canary_start
        if tr.ready:
            if last is None or now - last >= self.cfg.interval / max(1, len(self._engines(tr.name))):
                return True
        else:  # warming up: try to establish readiness once /health answers 200
            health = self.series.latest(tr.name, "", m.HEALTH_OK)
            return bool(health and health[1] == 1.0) and (last is None or now - last >= WARMUP_RETRY)
        unconfirmed = [f for f in seen.findings.get(tr.name, {}).values() if f is not None and not f.confirmed]
        if not unconfirmed:
            return False
        already_open = seen.open_kinds(tr.name)
        pace = self.cfg.interval if any(f.kind in already_open for f in unconfirmed) else self.cfg.confirm_cooldown
        return last is None or now - last >= pace

    def _rank(self, tr: TrackedTarget, seen: Seen) -> int | None:
        """The data-parallel rank this canary is for: the one an unconfirmed finding names, else
        the next in turn; None for a server with one engine, or one not ready yet."""
        if not tr.ready:
            return None
        for f in seen.findings.get(tr.name, {}).values():
            rank = f.signals.get("dp_rank") if f is not None and not f.confirmed else None
            if isinstance(rank, int) and f is not None and f.signals.get("engine"):
                return rank
        labels = self._engines(tr.name)
        if len(labels) < 2:
            return None
        turn = self._turn.get(tr.name, 0)
        self._turn[tr.name] = turn + 1
        return labels[turn % len(labels)]

    def _engines(self, target: str) -> list[int]:
        """The engine labels the server's ``/metrics`` shows one by one (data parallel), else []."""
        prefix = m.engine_subject("")
        subjects = self.series.subjects(target, m.ITERATIONS, prefix)
        return sorted(int(s.removeprefix(prefix)) for s in subjects if s.removeprefix(prefix).isdigit())

    def _job(self, tr: TrackedTarget, dp_rank: int | None = None) -> Job:
        name, url, model, key, cfg = tr.name, tr.target.api_url or "", tr.model, tr.target.key, self.cfg

        def run() -> tuple[ProcKey, CanaryResult]:
            return key, run_canary(self.http, name, url, model, cfg, self.clock.monotonic, dp_rank)

        return Job(name, run, 2 * cfg.timeout + 1, on_start=lambda now: self.tracker.canary_started(name, now))

    def fold(self, result: tuple[ProcKey, CanaryResult], now: float) -> Folded:
        key, res = result
        tr = self.tracker.targets.get(res.target)
        if tr is None:
            return Folded()
        tr.last_canary = res
        was_ready = tr.ready
        self.tracker.canary_finished(res.target, key, res.ok, res.model, now)
        if tr.ready and not was_ready:
            self.log.info("target %s is ready (canary answered in %.3fs)", res.target, res.latency)
        if res.auth_status is not None:  # loud whatever the readiness: no canary can confirm a hang
            return Folded(res.samples(), failed={f"{res.target}:auth": res.error or f"HTTP {res.auth_status}"})
        if res.ok:
            return Folded(res.samples(), cleared=(f"{res.target}:canary", f"{res.target}:auth"))
        if tr.ready or tr.ever_ready:
            return Folded(
                res.samples(), failed={f"{res.target}:canary": res.error or "failed"}, cleared=(f"{res.target}:auth",)
            )
        return Folded(res.samples(), cleared=(f"{res.target}:auth",))

    def close(self) -> None:
        pass

"""The vllm_http probe: one target's ``GET /health`` (status, latency) and ``GET /metrics``.

Runs off the loop thread (see ``vllm_guardian.state.async_runner``); returns samples
stamped with the injected clock when each answer arrived. ``HEALTH_OK`` is 1 for
200, 0 for 5xx or a refused connection (dead or not listening), and *absent* on a
timeout (a hung HTTP server is not proof of a dead engine). A /metrics page that
cannot be parsed gives ``METRICS_OK`` 0 and no vLLM samples, never zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.model import Sample
from vllm_guardian.series import metrics as m
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Schedule, Seen
from vllm_guardian.probes.vllm_metrics_parse import parse_vllm_metrics


@dataclass(frozen=True)
class HttpScrape:
    target: str
    samples: tuple[Sample, ...]
    health_status: int | None = None  # HTTP status, None when no answer
    health_error: str | None = None  # "refused: ...", "timeout: ...", or None
    metrics_error: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    page: str | None = None  # the last /metrics text, for evidence bundles


def scrape(http: HttpClient, target: str, api_url: str, timeout: float, now: Callable[[], float]) -> HttpScrape:
    samples: list[Sample] = []
    base = api_url.rstrip("/")
    health_status = health_error = None
    try:
        r = http.request("GET", base + "/health", timeout)
        health_status = r.status
        t = now()
        if r.status == 200 or r.status >= 500:  # other codes (404 …) say nothing about the engine
            samples.append(Sample(target, "", m.HEALTH_OK, 1.0 if r.status == 200 else 0.0, t))
        samples.append(Sample(target, "", m.HEALTH_LATENCY, r.elapsed, t))
    except HttpError as e:
        health_error = str(e)
        if e.reason == "refused":
            samples.append(Sample(target, "", m.HEALTH_OK, 0.0, now()))
    if health_error and health_error.startswith("refused"):
        # nothing listens: /metrics cannot answer either
        return HttpScrape(target, tuple(samples), health_status, health_error, "not scraped: refused")
    metrics_error = page = None
    values: dict[str, float] = {}
    try:
        r = http.request("GET", base + "/metrics", timeout)
        if r.status != 200:
            raise ProbeFailed(f"/metrics answered HTTP {r.status}")
        page = r.text
        values = parse_vllm_metrics(page)
        t = now()
        samples.extend(Sample(target, "", name, v, t) for name, v in values.items())
        samples.append(Sample(target, "", m.METRICS_OK, 1.0, t))
    except ProbeFailed as e:  # HttpError is a ProbeFailed too
        metrics_error = str(e)
        samples.append(Sample(target, "", m.METRICS_OK, 0.0, now()))
    return HttpScrape(target, tuple(samples), health_status, health_error, metrics_error, values, page)


class VllmHttpProbe:
    """Scrapes every live target with an API URL every ``interval``, off the loop thread; the
    latest scrape is kept on the tracked target (status, evidence)."""

    name = "vllm_http"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.cfg = parts.cfg.probes.vllm_http
        self.http = parts.seams.http
        self.clock = parts.seams.clock
        self.tracker = parts.tracker
        self._schedule = Schedule(self.cfg.interval)

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        out = []
        for tr in self.tracker.targets.values():
            url = tr.target.api_url
            if url and tr.api_alive and self._schedule.due(tr.name, now):
                out.append(
                    Job(
                        tr.name,
                        self._job(tr.name, url),
                        2 * self.cfg.timeout + 1,
                        on_start=partial(self._schedule.ran, tr.name),
                    )
                )
        return out

    def _job(self, name: str, url: str) -> Callable[[], HttpScrape]:
        return lambda: scrape(self.http, name, url, self.cfg.timeout, self.clock.monotonic)

    def fold(self, res: HttpScrape, now: float) -> Folded:
        tr = self.tracker.targets.get(res.target)
        if tr is None:
            return Folded()
        tr.last_scrape = res
        failed: dict[str, str] = {}
        cleared: list[str] = []
        if res.health_error:
            if tr.ever_ready or tr.ready:  # refused while warming up is normal, not an error
                failed[f"{res.target}:health"] = res.health_error
        else:
            cleared.append(f"{res.target}:health")
        if res.metrics_error and not (res.health_error or "").startswith("refused"):
            failed[f"{res.target}:metrics"] = res.metrics_error
        elif not res.metrics_error:
            cleared.append(f"{res.target}:metrics")
        return Folded(res.samples, failed=failed, cleared=cleared)

    def close(self) -> None:
        pass

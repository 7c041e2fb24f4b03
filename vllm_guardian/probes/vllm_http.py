"""The vllm_http probe: one target's ``GET /health`` (status, latency) and ``GET /metrics``.

Runs off the loop thread (see ``vllm_guardian.state.async_runner``); returns samples
stamped with the injected clock when each answer arrived. ``HEALTH_OK`` is 1 for
200, 0 for 5xx or a refused connection (dead or not listening), and *absent* on a
timeout (a hung HTTP server is not proof of a dead engine). A /metrics page that
cannot be parsed gives ``METRICS_OK`` 0 and no vLLM samples, never zeros.

A page is bounded before it costs anything (docs/design.md, Seeing: the probes): one larger than
``max_page_bytes`` is refused unparsed (the client reads at most 8 MiB), one naming more watched
samples than ``max_engines`` engines carry is refused by the parser, and only engine labels that
are ranks below ``max_engines`` get series of their own. What was dropped is counted on the
result (``dropped``: reason -> count), added to the target's counters by the fold (status
``metrics_dropped``, metric ``guardian_target_metrics_dropped_total``) and logged once per episode
(``<target>:metrics`` for a refused page, ``<target>:engines`` for dropped labels).

Warm is what the server says: while a target is not yet ready, a scrape whose ``/health``
answered 200 also asks ``GET /v1/models`` (vLLM listens only once its engine is ready, so a
server answering both has finished loading); the fold then marks the target ready, whether or
not this guardian saw it start, and a guardian started beside a hung engine judges it at once.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.config.schema import MAX_BODY
from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.model import ProcKey, Sample
from vllm_guardian.series import metrics as m
from vllm_guardian.state.readings import HttpScrape
from vllm_guardian.probes.canary import served_model
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Schedule, Seen
from vllm_guardian.probes.vllm_metrics_parse import MAX_ENGINES, PageRefused, read_page
from vllm_guardian.series.metrics import engine_subject


MAX_PAGE = 4 * 1024 * 1024  # probes.vllm_http.max_page_bytes


def scrape(
    http: HttpClient,
    target: str,
    api_url: str,
    timeout: float,
    now: Callable[[], float],
    check_models: bool = False,
    *,
    max_engines: int = MAX_ENGINES,
    max_page: int = MAX_PAGE,
) -> HttpScrape:
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
    dropped: dict[str, int] = {}
    try:
        r = http.request("GET", base + "/metrics", timeout)
        if r.status != 200:
            raise ProbeFailed(f"/metrics answered HTTP {r.status}")
        if len(r.body) > max_page or len(r.body) >= MAX_BODY:  # (the client reads at most MAX_BODY)
            raise PageRefused(
                "page_too_large",
                f"/metrics page refused: {len(r.body)} bytes or more, over probes.vllm_http.max_page_bytes {max_page}",
            )
        page = r.text
        read = read_page(page, max_engines)
        values, engines = read.values, read.engines
        if read.engines_dropped:
            dropped["engines"] = read.engines_dropped
        t = now()
        samples.extend(Sample(target, "", name, v, t) for name, v in values.items())
        if len(engines) > 1:  # data parallel: each engine's own progress and pending work
            samples.extend(
                Sample(target, engine_subject(e), name, v, t) for e, vals in engines.items() for name, v in vals.items()
            )
        samples.append(Sample(target, "", m.METRICS_OK, 1.0, t))
    except ProbeFailed as e:  # HttpError is a ProbeFailed too
        metrics_error = str(e)
        page = None if isinstance(e, PageRefused) else page  # a refused page is not kept for evidence
        if isinstance(e, PageRefused):
            dropped[e.reason] = 1
        samples.append(Sample(target, "", m.METRICS_OK, 0.0, now()))
    served = _served(http, base, timeout) if check_models and health_status == 200 else None
    return HttpScrape(
        target, tuple(samples), health_status, health_error, metrics_error, values, page, served, dropped=dropped
    )


def _served(http: HttpClient, base: str, timeout: float) -> str | None:
    """The first served model, or None when /v1/models does not answer with one."""
    try:
        return served_model(http, base, timeout)
    except HttpError:
        return None


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
        self.log = parts.log
        self._schedule = Schedule(self.cfg.interval)

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        out = []
        for tr in self.tracker.targets.values():
            url = tr.target.api_url
            if url and tr.api_alive and not tr.retired and not tr.grpc and self._schedule.due(tr.name, now):
                out.append(
                    Job(
                        tr.name,
                        self._job(tr.name, url, tr.target.key, not tr.ready),
                        2 * self.cfg.timeout + 1,
                        on_start=partial(self._schedule.ran, tr.name),
                    )
                )
        return out

    def _job(self, name: str, url: str, key: ProcKey, check_models: bool) -> Callable[[], HttpScrape]:
        def run() -> HttpScrape:
            res = scrape(
                self.http,
                name,
                url,
                self.cfg.timeout,
                self.clock.monotonic,
                check_models,
                max_engines=self.cfg.max_engines,
                max_page=self.cfg.max_page_bytes,
            )
            return replace(res, key=key)

        return run

    def fold(self, res: HttpScrape, now: float) -> Folded:
        tr = self.tracker.targets.get(res.target)
        if tr is None:
            return Folded()
        tr.last_scrape = res
        failed: dict[str, str] = {}
        cleared: list[str] = []
        if res.served is not None and res.key is not None:
            cleared.append(f"{res.target}:auth")  # /v1/models answered: the key is right
            if self.tracker.server_says_ready(res.target, res.key, res.served, now):
                self.log.info("target %s is ready (/health 200, /v1/models serves %s)", res.target, res.served)
        if res.health_error:
            if tr.ever_ready or tr.ready:  # refused while warming up is normal, not an error
                failed[f"{res.target}:health"] = res.health_error
        else:
            cleared.append(f"{res.target}:health")
        if res.metrics_error and not (res.health_error or "").startswith("refused"):
            failed[f"{res.target}:metrics"] = res.metrics_error
        elif not res.metrics_error:
            cleared.append(f"{res.target}:metrics")
        for reason, n in res.dropped.items():
            tr.metrics_dropped[reason] = tr.metrics_dropped.get(reason, 0) + n
        degraded: dict[str, str] = {}
        if res.dropped.get("engines"):
            degraded[f"{res.target}:engines"] = (
                f"/metrics names {res.dropped['engines']} engine label(s) that are no data-parallel rank below "
                f"probes.vllm_http.max_engines {self.cfg.max_engines}: not judged one by one (dropped, counted)"
            )
        elif not res.metrics_error:
            cleared.append(f"{res.target}:engines")
        return Folded(res.samples, failed=failed, degraded=degraded, cleared=cleared)

    def close(self) -> None:
        pass

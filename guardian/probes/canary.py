"""The canary probe: a one-token completion that proves the engine is making progress.

``POST /v1/completions`` with the served model (from config, else the first of
``GET /v1/models``), ``max_tokens`` 1, ``temperature`` 0 and a short timeout.
Used to confirm a suspect and as a slow periodic end-to-end check; the daemon
keeps at most one in flight per target. A timeout is the hang signal; a fast
failure (HTTP 500, refused) is *not* a hang and is reported as such.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config_schema import CanaryProbeConfig
from ..host.http import HttpClient, HttpError
from ..model import Sample
from ..series import metrics as m


@dataclass(frozen=True)
class CanaryResult:
    target: str
    started: float
    ended: float
    ok: bool
    timed_out: bool
    model: str | None
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.ended - self.started

    def samples(self) -> list[Sample]:
        t = self.ended
        out = [
            Sample(self.target, "", m.CANARY_OK, 1.0 if self.ok else 0.0, t),
            Sample(self.target, "", m.CANARY_TIMEOUT, 1.0 if self.timed_out else 0.0, t),
            Sample(self.target, "", m.CANARY_STARTED, self.started, t),
        ]
        if self.ok or self.timed_out:
            out.append(Sample(self.target, "", m.CANARY_LATENCY, self.latency, t))
        return out


def served_model(http: HttpClient, api_url: str, timeout: float) -> str:
    r = http.request("GET", api_url.rstrip("/") + "/v1/models", timeout)
    if r.status != 200:
        raise HttpError("error", f"/v1/models answered HTTP {r.status}")
    try:
        return str(r.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise HttpError("error", f"/v1/models: unexpected body ({type(e).__name__})") from None


def run_canary(http: HttpClient, target: str, api_url: str, model: str | None,
               cfg: CanaryProbeConfig, now: Callable[[], float]) -> CanaryResult:
    started = now()
    try:
        if model is None:
            model = served_model(http, api_url, cfg.timeout)
        body = {"model": model, "prompt": cfg.prompt, "max_tokens": cfg.max_tokens, "temperature": 0}
        r = http.request("POST", api_url.rstrip("/") + "/v1/completions", cfg.timeout, body=body)
    except HttpError as e:
        return CanaryResult(target, started, now(), False, e.reason == "timeout", model, str(e))
    ended = now()
    if r.status != 200:
        return CanaryResult(target, started, ended, False, False, model, f"HTTP {r.status}: {r.text[:200]}")
    try:
        choices = r.json()["choices"]
        if not isinstance(choices, list) or not choices:
            raise ValueError("no choices")
    except (ValueError, KeyError, TypeError) as e:
        return CanaryResult(target, started, ended, False, False, model, f"bad completion body: {e}")
    return CanaryResult(target, started, ended, True, False, model)

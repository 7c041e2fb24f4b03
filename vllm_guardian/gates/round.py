"""One gate round against one target: the only part of the gates that talks to a server.

Runs on the probe pool, never on the loop thread. Through the HTTP seam it asks:
``GET /version`` (the vLLM version keys the baseline), each diagnostic and shadow
prompt greedily (``temperature 0``, fixed ``seed``, ``logprobs: top_logprobs``), and
the reference text with ``max_tokens: 1`` and ``prompt_logprobs: 0`` (falling back to
``echo`` + ``logprobs`` when the server ignores ``prompt_logprobs``).

Nothing here decides about corruption. A request that fails (refused, timed out,
4xx/5xx, an answer of the wrong shape)
ends the round as *incomplete* with a note: hangs and deaths are other detectors'
business, and a half round must not be judged. A server that refuses logprobs is
asked again without them (L3 then cannot be judged, the note says so); one that
fails (5xx) only when asked for logprobs cannot encode them — vLLM answers 500 for
NaN logprobs — which L3 judges. A reference text longer than the model's context
is a note, not a failure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.host.http import HttpClient, HttpError
from vllm_guardian.gates import known_answers, perplexity
from vllm_guardian.gates.judge import GateAnswer, RoundAnswers
from vllm_guardian.gates.vllm_answers import AnswerError, Completion, echo_prompt_logprobs, parse_completion

UNKNOWN_VERSION = "unknown"


class _Stop(Exception):
    """The round cannot go on; the message is the note."""


def _error_text(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    return " ".join(text.split())[:160]


class RoundRunner:
    def __init__(self, http: HttpClient, url: str, cfg: GatesConfig) -> None:
        self.http, self.url, self.cfg = http, url.rstrip("/"), cfg
        self.requests = 0

    def _post(self, body: dict) -> tuple[int, Any, bytes]:
        self.requests += 1
        try:
            resp = self.http.request("POST", self.url + "/v1/completions", self.cfg.timeout, body)
        except HttpError as e:
            raise _Stop(f"gate request {e.reason}: {e.detail}"[:200]) from None
        try:
            data = resp.json() if resp.status == 200 else None
        except ValueError:
            raise _Stop("gate answer is not JSON") from None
        return resp.status, data, resp.body

    def version(self) -> str:
        try:
            resp = self.http.request("GET", self.url + "/version", self.cfg.timeout)
            v = resp.json().get("version") if resp.status == 200 else None
        except (HttpError, ValueError, AttributeError):
            return UNKNOWN_VERSION
        return str(v) if v else UNKNOWN_VERSION

    def model(self) -> str | None:
        try:
            resp = self.http.request("GET", self.url + "/v1/models", self.cfg.timeout)
            if resp.status != 200:
                return None
            return str(resp.json()["data"][0]["id"])
        except (HttpError, ValueError, KeyError, IndexError, TypeError):
            return None

    def complete(self, model: str, prompt: str, max_tokens: int, notes: list[str]) -> Completion:
        base = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": self.cfg.seed}
        status, data, raw = self._post(dict(base, logprobs=self.cfg.top_logprobs))
        unencodable = None
        if status == 400 and b"logprobs" in raw:
            notes.append("the server refuses logprobs: L3 not judged")
            status, data, raw = self._post(base)
        elif status != 200:
            # vLLM cannot encode NaN/inf logprobs as JSON ("Out of range float values are not JSON
            # compliant", measured as HTTP 400 on 0.32); if the same request without logprobs
            # works, the logits themselves are broken
            first = f"HTTP {status}: {_error_text(raw)}"
            status, data, raw = self._post(base)
            if status == 200:
                unencodable = first
        if status != 200:
            raise _Stop(f"gate request answered {status}: {_error_text(raw)}")
        try:
            c = parse_completion(data)
        except AnswerError as e:
            raise _Stop(f"gate answer malformed: {e}") from None
        return replace(c, logprobs_error=unencodable) if unencodable else c

    def reference(self, model: str, text: str, notes: list[str]) -> tuple[float | None, ...] | None:
        base = {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0, "seed": self.cfg.seed}
        status, data, raw = self._post(dict(base, prompt_logprobs=0))
        if status == 400 and (b"context length" in raw or b"maximum context" in raw or b"too long" in raw):
            notes.append(f"L2 not judged: the reference text is longer than the model's context ({_error_text(raw)})")
            return None
        c = None
        if status == 200:
            try:
                c = parse_completion(data)
            except AnswerError as e:
                notes.append(f"L2 not judged: reference answer malformed: {e}")
                return None
            if c.prompt_logprobs is not None:
                return c.prompt_logprobs
        # no prompt_logprobs (an older vLLM, a proxy): echo the prompt with its logprobs
        status, data, raw = self._post(dict(base, echo=True, logprobs=0))
        if status == 200:
            try:
                lps = echo_prompt_logprobs(parse_completion(data), 1)
            except AnswerError:
                lps = None
            if lps is not None:
                return lps
        notes.append("L2 not judged: the server returns no prompt logprobs (prompt_logprobs nor echo)")
        return None


def run_round(
    http: HttpClient, target: str, url: str, model: str | None, cfg: GatesConfig, wall: Callable[[], float]
) -> RoundAnswers:
    """Asks one target every gate prompt; never raises for what the server does."""
    r = RoundRunner(http, url, cfg)
    notes: list[str] = []
    version = r.version()
    model = r.model() or model  # asked each round: a model swapped under the same target is seen at once
    if model is None:
        return RoundAnswers(target, "?", version, wall(), notes=("no model: /v1/models unreadable",), complete=False)
    answers: list[GateAnswer] = []
    complete = True
    ref = None
    try:
        for d in known_answers.diagnostics_of(cfg):
            c = r.complete(model, d.prompt, d.max_tokens, notes)
            answers.append(
                GateAnswer(
                    "diagnostic",
                    d.prompt,
                    c.text,
                    c.finish_reason,
                    c.has_logprobs,
                    c.token_logprobs,
                    c.top_logprobs,
                    d.expect,
                    c.logprobs_error,
                    c.tokens,
                    c.top_tokens,
                )
            )
        if cfg.shadow:
            for prompt in cfg.shadow_prompts:
                c = r.complete(model, prompt, cfg.shadow_max_tokens, notes)
                answers.append(
                    GateAnswer(
                        "shadow",
                        prompt,
                        c.text,
                        c.finish_reason,
                        c.has_logprobs,
                        c.token_logprobs,
                        c.top_logprobs,
                        None,
                        c.logprobs_error,
                        c.tokens,
                        c.top_tokens,
                    )
                )
        ref = r.reference(model, cfg.reference_text or perplexity.BUILTIN_REFERENCE, notes)
    except _Stop as e:
        notes.append(str(e))
        complete = False
    return RoundAnswers(
        target,
        model,
        version,
        wall(),
        tuple(answers) if complete else (),
        ref if complete else None,
        tuple(dict.fromkeys(notes)),
        complete,
        requests=r.requests,
    )

"""For gateways: check live completions (L1, L3) and report failures to the guardian.

Import only this module; it pulls in nothing but the pure checks and, for
``Reporter``, the ``redis`` client::

    from vllm_guardian.gates.gateway import Reporter, check_completion

    keys = load_keys(keys_file="/etc/guardian/trust.keys")  # the guardians' gates.trust keys
    reporter = Reporter("redis://redis:6379/0", keys=keys)  # or Reporter(client=redis.Redis(...), keys=...)
    problems = check_completion(choice)                   # a vLLM /v1/completions choices[i]
    if problems:
        reporter.report("node-a/vllm-8000", request_id, problems)   # node/target: one node only

``check_text`` is L1 on a text, ``check_logprobs`` L3 on per-position logprobs; both
return ``Problem(level, code, detail)`` tuples (empty when fine). The reporter
publishes the guardian's report message on ``vllm_health_alert`` (one message per
request, at its most decisive level), signed (``kid``, ``sig``) when given keys, and never raises: a Redis
error is returned as text.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from vllm_guardian.gates.distribution import check_distribution
from vllm_guardian.gates.format_check import check_format
from vllm_guardian.gates.trust import Keys, load_keys, sign

__all__ = ["Keys", "Problem", "Reporter", "check_completion", "check_logprobs", "check_text", "load_keys"]

DEFAULT_CHANNEL = "vllm_health_alert"


@dataclass(frozen=True)
class Problem:
    level: str  # L1 | L3
    code: str
    detail: str


def check_text(text: str, finish_reason: str | None = None) -> tuple[Problem, ...]:
    """L1: control characters, runs, repeats, odd code points, script mix, empty."""
    return tuple(Problem("L1", p.code, p.detail) for p in check_format(text, finish_reason))


def check_logprobs(
    token_logprobs: Sequence[float | None], top_logprobs: Sequence[Sequence[float]], **bounds: float
) -> tuple[Problem, ...]:
    """L3: NaN/inf, flat distribution, inconsistent top-1 (bounds: max_entropy, min_top1, low_entropy)."""
    problems, _ = check_distribution(token_logprobs, top_logprobs, **bounds)
    return tuple(Problem("L3", p.code, p.detail) for p in problems)


def check_completion(choice: Mapping[str, Any], **bounds: float) -> tuple[Problem, ...]:
    """L1 and, when the choice carries ``logprobs``, L3 on one vLLM completion choice."""
    out = check_text(str(choice.get("text") or ""), choice.get("finish_reason"))
    lp = choice.get("logprobs")
    if isinstance(lp, dict):
        tops = [list((t or {}).values()) for t in (lp.get("top_logprobs") or [])]
        out += check_logprobs(lp.get("token_logprobs") or [], tops, **bounds)
    return out


def report_message(
    instance_id: str,
    request_id: str,
    level: str,
    type_: str,
    details: Any,
    timestamp: float | None = None,
    keys: Keys | None = None,
) -> dict:
    """The report the guardian reads on its reports channel; signed when ``keys`` are given."""
    msg = {
        "instance_id": instance_id,
        "request_id": request_id,
        "timestamp": time.time() if timestamp is None else timestamp,
        "check_level": level,
        "type": type_,
        "details": details,
    }
    return sign(msg, keys) if keys is not None else msg


class Reporter:
    """Publishes reports; ``client`` is a ``redis.Redis`` (or anything with ``publish``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any = None,
        channel: str = DEFAULT_CHANNEL,
        timeout: float = 2.0,
        keys: Keys | None = None,
    ) -> None:
        if client is None:
            from vllm_guardian.store.client import make_client  # any fleet-store URL, Sentinel and Cluster too

            client = make_client(url or "redis://127.0.0.1:6379/0", timeout=timeout)
        self.client, self.channel, self.keys = client, channel, keys

    def report(
        self, instance_id: str, request_id: str, problems: Sequence[Problem], output: str = "", prompt: str = ""
    ) -> str | None:
        """One message for the request (a request id is reported once: the guardian drops a
        repeat as a replay), at its most decisive level (L3, which acts at once, before L1),
        every problem listed; None when sent (or nothing to send), else the error text."""
        if not problems:
            return None
        main = min(problems, key=lambda p: (p.level != "L3", p.level))
        details = {
            "prompt": prompt[:200],
            "output": output[:200],
            "problems": [f"{p.level} {p.code}: {p.detail}"[:200] for p in problems[:10]],
        }
        try:
            msg = report_message(instance_id, request_id, main.level, main.code, details, keys=self.keys)
            self.client.publish(self.channel, json.dumps(msg, ensure_ascii=False))
        except Exception as e:  # noqa: BLE001 - a gateway must not fail a user request over a report
            return f"{type(e).__name__}: {e}"
        return None

"""What explains a failing gate round, for the ``output_corruption`` incident. Pure.

Per failing prompt of a round: the prompt, the whole answer (capped), its tokens with
their logprobs and top alternatives, what it was judged against (the expectation and
the target's baseline answer) — and, for an L2 failure, the reference perplexity with
the baseline's measurements. The incident carries these with the model and vLLM version,
so whoever reads it sees what the server said and why that was wrong, without a stack
dump of a server that is not stuck.
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.gates.baseline import Baseline
from vllm_guardian.gates.judge import GateFailure, RoundAnswers

MAX_TEXT = 400
MAX_TOKENS = 32
MAX_PROMPTS = 8


def _num(x: float | None) -> object:
    if x is None:
        return None
    return round(x, 4) if x == x and x not in (float("inf"), float("-inf")) else str(x)


def failure_evidence(
    ra: RoundAnswers, failures: list[GateFailure] | tuple[GateFailure, ...], baseline: Baseline | None
) -> tuple[dict[str, Any], ...]:
    """One entry per failing prompt (at most ``MAX_PROMPTS``), answers as the server gave them."""
    by_prompt = {a.prompt: a for a in ra.answers}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for f in failures:
        if f.prompt in seen or len(out) >= MAX_PROMPTS:
            continue
        seen.add(f.prompt)
        entry: dict[str, Any] = {
            "prompt": f.prompt[:MAX_TEXT],
            "levels": sorted({g.level for g in failures if g.prompt == f.prompt}),
            "checks": sorted({g.check for g in failures if g.prompt == f.prompt}),
            "expected": f.expected,
        }
        a = by_prompt.get(f.prompt)
        if a is not None:
            entry.update(
                role=a.role,
                output=a.text[:MAX_TEXT],
                finish_reason=a.finish_reason,
                tokens=list(a.tokens[:MAX_TOKENS]),
                token_logprobs=[_num(x) for x in a.token_logprobs[:MAX_TOKENS]],
                top_logprobs=[{t: _num(v) for t, v in d.items()} for d in a.top_tokens[:MAX_TOKENS]],
                logprobs_error=a.logprobs_error,
            )
            if baseline is not None and f.prompt in baseline.answers:
                entry["baseline_answer"] = baseline.answers[f.prompt][:MAX_TEXT]
                entry["baseline_tokens"] = list(baseline.tokens.get(f.prompt, ())[:MAX_TOKENS])
        elif f.level == "L2":
            entry["figures"] = dict(f.figures)
            if baseline is not None:
                entry["baseline_perplexities"] = [_num(x) for x in baseline.perplexities]
        else:
            entry["figures"] = dict(f.figures)
        out.append(entry)
    return tuple(out)

"""One gate round, judged: answers + the target's baseline + config -> failures per level. Pure.

``RoundAnswers`` is what ``round`` fetched from one target; ``judge_round`` applies
L1 (every completion; a problem the baseline answer to the same prompt already had
is this model's normal, not a failure), L2 (reference perplexity vs the baseline's
median, once ``baseline_samples`` are in), L3 (every completion's logprobs) and L5
(diagnostic expectations). L4 needs the peers and is judged by the probe
(``agreement.judge``) from ``RoundVerdict.fingerprints``.

``next_baseline`` says how the baseline grows from a round: it is created from the
first round whose L3 passed, and takes reference perplexities until it has
``baseline_samples`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates import agreement, distribution, format_check, known_answers, perplexity
from vllm_guardian.gates.baseline import Baseline

EXCERPT = 120


@dataclass(frozen=True)
class GateAnswer:
    role: str  # diagnostic | shadow
    prompt: str
    text: str
    finish_reason: str | None
    has_logprobs: bool
    token_logprobs: tuple[float | None, ...] = ()
    top_logprobs: tuple[tuple[float, ...], ...] = ()
    expect: str | None = None  # diagnostics only
    logprobs_error: str | None = None  # the server failed when asked for logprobs, answered without
    tokens: tuple[str, ...] = ()
    top_tokens: tuple[dict[str, float], ...] = ()  # per position: token -> logprob


@dataclass(frozen=True)
class RoundAnswers:
    """What one round fetched. ``complete`` is False when a request failed (then nothing is judged
    from the missing part and ``notes`` says why)."""

    target: str
    model: str
    version: str
    wall: float
    answers: tuple[GateAnswer, ...] = ()
    reference_logprobs: tuple[float | None, ...] | None = None
    notes: tuple[str, ...] = ()  # status lines: why a part could not be judged
    complete: bool = True
    requests: int = 0  # completions requests this round cost the server


@dataclass(frozen=True)
class GateFailure:
    level: str  # L1 | L2 | L3 | L4 | L5
    check: str  # e.g. control, perplexity, non_finite, disagree, expect
    prompt: str
    output: str  # excerpt
    expected: str
    figures: dict = field(default_factory=dict)
    # what the failure rests on: "own" (the guardian's own round), "peers" (an L4 failure that
    # only other nodes' fingerprints make), "local_peers" (an L4 failure that only autodiscovered
    # servers on this node make), "report" (a report from a gateway): external evidence is a
    # hint, never a reason to restart alone (remediation/external.py)
    source: str = "own"

    def excerpt(self) -> GateFailure:
        """As status shows it: prompt and output cut to ``EXCERPT`` characters."""
        return replace(self, prompt=self.prompt[:EXCERPT], output=self.output[:EXCERPT], figures=dict(self.figures))

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "check": self.check,
            "prompt": self.prompt[:EXCERPT],
            "output": self.output[:EXCERPT],
            "expected": self.expected,
            "figures": dict(self.figures),
            "source": self.source,
        }


@dataclass(frozen=True)
class RoundVerdict:
    failures: tuple[GateFailure, ...]
    judged: frozenset[str]  # levels that were judged this round (L1, L2, L3, L5)
    fingerprints: dict[str, str]  # shadow + diagnostic prompt -> fingerprint (for L4)
    perplexity: float | None = None
    notes: tuple[str, ...] = ()
    tie_flips: frozenset[str] = frozenset()  # prompts whose answer left the baseline at a near tie

    def failed(self, level: str) -> tuple[GateFailure, ...]:
        return tuple(f for f in self.failures if f.level == level)


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def judge_round(ra: RoundAnswers, baseline: Baseline | None, cfg: GatesConfig) -> RoundVerdict:
    failures: list[GateFailure] = []
    judged: set[str] = set()
    notes = list(ra.notes)
    fps: dict[str, str] = {}
    flips: set[str] = set()
    for a in ra.answers:
        fps[a.prompt] = agreement.fingerprint(ra.model, ra.version, a.prompt, a.text)
        flip = _tie_flip(a, baseline, cfg.tie_margin)
        if flip is not None:  # greedy, but batched numerics picked the other of two near-equal tokens
            flips.add(a.prompt)
            notes.append(
                f"near-tie flip on {a.prompt[:30]!r} at token {flip[0]} (gap {flip[1]:.3g} nats): "
                "L1/L4/L5 not judged on it this round"
            )
        # L1, against what this model's healthy answer to the same prompt already showed; the round
        # that takes the baseline defines it (the random test model answers control characters)
        known = baseline.format_codes.get(a.prompt) if baseline else None
        if known is not None:
            judged.add("L1")
            for p in format_check.check_format(a.text, a.finish_reason):
                if p.code not in known and flip is None:
                    failures.append(
                        GateFailure(
                            "L1",
                            p.code,
                            a.prompt,
                            _excerpt(a.text),
                            "text without " + p.code.replace("_", " "),
                            {"detail": p.detail},
                        )
                    )
        # L3
        if a.logprobs_error:
            judged.add("L3")
            failures.append(
                GateFailure(
                    "L3",
                    "non_finite",
                    a.prompt,
                    _excerpt(a.text),
                    "encodable logprobs",
                    {
                        "detail": f"with logprobs the server fails ({a.logprobs_error}), "
                        "without it answers: NaN/inf logits"
                    },
                )
            )
        elif a.has_logprobs:
            judged.add("L3")
            problems, fig = distribution.check_distribution(
                a.token_logprobs,
                a.top_logprobs,
                max_entropy=cfg.max_entropy,
                min_top1=cfg.min_top1,
                low_entropy=cfg.low_entropy,
            )
            for dp in problems:
                failures.append(
                    GateFailure(
                        "L3",
                        dp.code,
                        a.prompt,
                        _excerpt(a.text),
                        "a peaked, finite distribution",
                        {
                            "detail": dp.detail,
                            "mean_entropy": _r(fig.mean_entropy),
                            "mean_top1": _r(fig.mean_top1),
                            "non_finite": fig.non_finite,
                        },
                    )
                )
        # L5
        if a.role == "diagnostic" and a.expect is not None and flip is None:
            base_answer = baseline.answers.get(a.prompt) if baseline else None
            exp = known_answers.check_expectation(a.text, a.expect, base_answer)
            if exp.ok is not None:
                judged.add("L5")
            if exp.ok is False:
                failures.append(GateFailure("L5", "expect", a.prompt, _excerpt(a.text), exp.expected))
    if ra.answers and not any(a.has_logprobs or a.logprobs_error for a in ra.answers):
        notes.append("L3 not judged: the server returns no logprobs")
    ppl = None
    if ra.reference_logprobs is not None:
        ppl = perplexity.perplexity(ra.reference_logprobs)
        base_ppl = perplexity.baseline_of(baseline.perplexities) if baseline else None
        if ppl is None:
            notes.append("L2 not judged: no reference logprobs in the answer")
        elif baseline is None or len(baseline.perplexities) < cfg.baseline_samples or base_ppl is None:
            have = len(baseline.perplexities) if baseline else 0
            notes.append(f"L2 baseline {have}/{cfg.baseline_samples}")
        else:
            judged.add("L2")
            v = perplexity.judge(ppl, base_ppl, cfg.perplexity_factor)
            if not v.ok:
                failures.append(
                    GateFailure(
                        "L2",
                        "perplexity",
                        "<reference text>",
                        "",
                        f"<= {cfg.perplexity_factor:g} x {base_ppl:.4g}",
                        {"perplexity": _r(ppl), "baseline": _r(base_ppl), "ratio": _r(v.ratio)},
                    )
                )
    return RoundVerdict(tuple(failures), frozenset(judged), fps, ppl, tuple(notes), frozenset(flips))


def _tie_flip(a: GateAnswer, baseline: Baseline | None, margin: float) -> tuple[int, float] | None:
    if baseline is None or a.prompt not in baseline.tokens or not a.tokens:
        return None
    if known_answers.normalize(a.text) == known_answers.normalize(baseline.answers.get(a.prompt, "")):
        return None
    return agreement.near_tie_flip(a.tokens, a.top_tokens, baseline.tokens[a.prompt], margin)


def next_baseline(
    ra: RoundAnswers, verdict: RoundVerdict, baseline: Baseline | None, cfg: GatesConfig
) -> Baseline | None:
    """The baseline after this round, or None when it does not change."""
    if not ra.complete or verdict.failed("L3"):
        return None
    if baseline is None:
        if not ra.answers:
            return None
        b = Baseline(
            ra.target,
            ra.model,
            ra.version,
            ra.wall,
            answers={a.prompt: a.text for a in ra.answers},
            fingerprints=dict(verdict.fingerprints),
            format_codes={
                a.prompt: tuple(sorted(format_check.problem_codes(format_check.check_format(a.text, a.finish_reason))))
                for a in ra.answers
            },
            tokens={a.prompt: a.tokens for a in ra.answers if a.tokens},
        )
        return (
            b.with_perplexity(verdict.perplexity)
            if verdict.perplexity is not None and _usable(verdict.perplexity)
            else b
        )
    new = [a for a in ra.answers if a.prompt not in baseline.answers]  # prompts configured since
    b = baseline
    if new:
        b = replace(
            b,
            answers={**b.answers, **{a.prompt: a.text for a in new}},
            fingerprints={**b.fingerprints, **{a.prompt: verdict.fingerprints[a.prompt] for a in new}},
            format_codes={
                **b.format_codes,
                **{
                    a.prompt: tuple(
                        sorted(format_check.problem_codes(format_check.check_format(a.text, a.finish_reason)))
                    )
                    for a in new
                },
            },
        )
    if len(b.perplexities) < cfg.baseline_samples and verdict.perplexity is not None and _usable(verdict.perplexity):
        b = b.with_perplexity(verdict.perplexity)
    return b if b is not baseline else None


def _usable(x: float | None) -> bool:
    return x is not None and x == x and x not in (float("inf"), float("-inf"))


def _r(x: float | None) -> object:
    """A figure for JSON: rounded, or its name when not finite."""
    return None if x is None else (round(x, 4) if _usable(x) else str(x))

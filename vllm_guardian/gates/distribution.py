"""L3 distribution check from vLLM's per-position logprobs: pure, also offered to gateways.

Input per generated position: the chosen token's logprob and the ``top_logprobs``
values (vLLM returns the k most likely tokens, the chosen one possibly added).
Failures (``DistributionProblem.code``):

- ``non_finite``: a NaN or ±inf logprob anywhere (vLLM clamps a true -inf to -9999.0,
  so an infinity in an answer is itself a sign of broken logits);
- ``entropy``: the mean estimated entropy above ``max_entropy`` nats: a flat
  distribution (noise) rather than a model that prefers some tokens;
- ``low_top1``: the mean top-1 probability below ``min_top1`` while the estimated
  entropy is below ``low_entropy``: numbers that cannot come from one softmax;
- ``mass``: the top-k probabilities of a position sum above 1 (+1 %): not a distribution.

The entropy estimate of a position with top-k probabilities ``p_i`` and residual
mass ``r = 1 - sum(p_i)`` is ``-sum(p_i log p_i) - r log(p_min)``: the residual is
taken as spread over tokens no more likely than the least likely one shown, which
makes a flat distribution read as ``log(vocabulary)``, as it should.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MASS_TOLERANCE = 0.01


@dataclass(frozen=True)
class DistributionProblem:
    code: str  # non_finite | entropy | low_top1 | mass
    detail: str


@dataclass(frozen=True)
class DistributionFigures:
    positions: int
    mean_entropy: float | None
    mean_top1: float | None
    non_finite: int


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def position_entropy(top: Sequence[float]) -> float:
    """Estimated entropy (nats) of one position from its top-k logprobs (all finite)."""
    probs = sorted((math.exp(lp) for lp in top), reverse=True)
    probs = [p for p in probs if p > 0]
    if not probs:
        return 0.0
    h = -sum(p * math.log(p) for p in probs)
    residual = max(0.0, 1.0 - sum(probs))
    return h - residual * math.log(probs[-1])


def figures(token_logprobs: Sequence[float | None], top_logprobs: Sequence[Sequence[float]]) -> DistributionFigures:
    bad = sum(1 for lp in token_logprobs if lp is not None and not _finite(lp))
    bad += sum(1 for top in top_logprobs for lp in top if not _finite(lp))
    usable = [list(top) for top in top_logprobs if top and all(_finite(lp) for lp in top)]
    if not usable:
        return DistributionFigures(len(top_logprobs), None, None, bad)
    ent = [position_entropy(top) for top in usable]
    top1 = [math.exp(max(top)) for top in usable]
    return DistributionFigures(len(top_logprobs), sum(ent) / len(ent), sum(top1) / len(top1), bad)


def check_distribution(
    token_logprobs: Sequence[float | None],
    top_logprobs: Sequence[Sequence[float]],
    *,
    max_entropy: float = 8.0,
    min_top1: float = 0.05,
    low_entropy: float = 2.0,
) -> tuple[tuple[DistributionProblem, ...], DistributionFigures]:
    """The L3 problems of one completion and the figures they were judged on."""
    fig = figures(token_logprobs, top_logprobs)
    problems: list[DistributionProblem] = []
    if fig.non_finite:
        problems.append(DistributionProblem("non_finite", f"{fig.non_finite} NaN/inf logprob(s)"))
    for i, top in enumerate(top_logprobs):
        if top and all(_finite(lp) for lp in top):
            mass = sum(math.exp(lp) for lp in top)
            if mass > 1.0 + MASS_TOLERANCE:
                problems.append(DistributionProblem("mass", f"position {i}: top-k probabilities sum to {mass:.3f}"))
                break
    if fig.mean_entropy is not None and fig.mean_entropy > max_entropy:
        problems.append(
            DistributionProblem(
                "entropy", f"mean entropy {fig.mean_entropy:.2f} nats > {max_entropy:g} (flat distribution)"
            )
        )
    if (
        fig.mean_top1 is not None
        and fig.mean_entropy is not None
        and fig.mean_top1 < min_top1
        and fig.mean_entropy < low_entropy
    ):
        problems.append(
            DistributionProblem(
                "low_top1",
                f"mean top-1 probability {fig.mean_top1:.3f} < {min_top1:g} with entropy {fig.mean_entropy:.2f} nats",
            )
        )
    return tuple(problems), fig

"""L2: perplexity of the reference text from per-token logprobs, judged against a baseline.

Pure. ``perplexity`` is ``exp(-mean(logprob))`` over the tokens that have one (vLLM
gives none for the first prompt token); a non-finite logprob makes it ``inf``
(a corrupted distribution cannot score a text). ``judge`` fails a measurement above
``factor`` x the baseline, which is the median of the first healthy measurements.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# A passage of plain, common English: any competent model scores it low.
BUILTIN_REFERENCE = (
    "The sun rose over the quiet town, and the people began their day. Children walked to "
    "school while their parents went to work. In the market, farmers sold fresh bread, milk "
    "and vegetables. At noon the church bell rang, and many people stopped to eat lunch with "
    "their friends. In the evening the streets grew calm again, and families sat down together "
    "to share dinner and talk about the day."
)


@dataclass(frozen=True)
class PerplexityVerdict:
    ok: bool
    perplexity: float
    baseline: float
    factor: float

    @property
    def ratio(self) -> float:
        return self.perplexity / self.baseline if self.baseline > 0 else math.inf


def perplexity(logprobs: Sequence[float | None]) -> float | None:
    """``exp(-mean)`` of the known logprobs; None when there is none; inf when one is not finite."""
    known = [lp for lp in logprobs if lp is not None]
    if not known:
        return None
    if any(not math.isfinite(lp) for lp in known):
        return math.inf
    mean = sum(known) / len(known)
    return math.exp(-mean) if -mean < 700 else math.inf


def baseline_of(samples: Sequence[float]) -> float | None:
    """The median of the finite samples; None when there is none."""
    finite = [s for s in samples if math.isfinite(s)]
    return statistics.median(finite) if finite else None


def judge(value: float, baseline: float, factor: float) -> PerplexityVerdict:
    ok = math.isfinite(value) and value <= factor * baseline
    return PerplexityVerdict(ok, value, baseline, factor)

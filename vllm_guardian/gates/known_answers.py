"""L5: a configured prompt's answer against its expectation: a regex, or the baseline answer.

Pure. ``expect`` is a regular expression searched in the answer, or the word
``baseline``: the answer must equal (after ``normalize``) the one the target gave
when its baseline was taken. With ``baseline`` and no baseline yet, nothing is judged.

``BUILTIN_CHECKS`` are known-answer prompts that need no world knowledge — copy a line,
count on, continue a pattern — each expecting the target's own first healthy answer.
``diagnostics_of`` is what a round asks: the configured diagnostics, then (with
``gates.builtin_checks``) the built-in ones whose prompt is not configured already.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from vllm_guardian.config.schema import DiagnosticPromptConfig, GatesConfig

BASELINE = "baseline"

# Short prompts a model answers from the prompt alone (copying, counting, a repeating pattern):
# a model that answered them one way when healthy and another way now has changed, whatever
# it knows about the world. A few tokens each: the cost of a round grows little.
BUILTIN_CHECKS = (
    DiagnosticPromptConfig("Repeat the line exactly.\nLine: red apple, blue river, green stone\nRepeat:", BASELINE, 8),
    DiagnosticPromptConfig("Count on: one, two, three, four, five,", BASELINE, 6),
    DiagnosticPromptConfig("Continue the pattern: A B C A B C A B C A", BASELINE, 6),
)


@dataclass(frozen=True)
class Expectation:
    ok: bool | None  # None: not judged (no baseline yet)
    expected: str  # what was expected, as shown in an incident


def normalize(text: str) -> str:
    """NFC, whitespace runs collapsed to one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def check_expectation(answer: str, expect: str, baseline_answer: str | None) -> Expectation:
    if expect == BASELINE:
        if baseline_answer is None:
            return Expectation(None, "the baseline answer (none yet)")
        return Expectation(normalize(answer) == normalize(baseline_answer), f"baseline {baseline_answer!r}")
    return Expectation(re.search(expect, answer) is not None, f"/{expect}/")


def diagnostics_of(cfg: GatesConfig) -> tuple[DiagnosticPromptConfig, ...]:
    """The L5 prompts of a round: the configured ones, then the built-in checks not among them."""
    if not cfg.builtin_checks:
        return tuple(cfg.diagnostics)
    have = {d.prompt for d in cfg.diagnostics}
    return tuple(cfg.diagnostics) + tuple(d for d in BUILTIN_CHECKS if d.prompt not in have)

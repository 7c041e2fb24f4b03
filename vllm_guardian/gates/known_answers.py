"""L5: a configured prompt's answer against its expectation: a regex, or the baseline answer.

Pure. ``expect`` is a regular expression searched in the answer, or the word
``baseline``: the answer must equal (after ``normalize``) the one the target gave
when its baseline was taken. With ``baseline`` and no baseline yet, nothing is judged.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

BASELINE = "baseline"


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

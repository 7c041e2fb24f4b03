"""L1 format check of one completion text: pure, also offered to gateways.

A problem is a ``FormatProblem(code, detail)``; the codes are a closed set:

- ``control``: a control character (< 32 other than ``\\n \\r \\t``, DEL, C1 controls);
- ``run``: ``RUN_LENGTH`` or more identical non-space characters in a row ("!!!!!!!!!!");
- ``repeat``: a fragment of 2..``REPEAT_UNIT_MAX`` characters repeated back to back
  ``REPEAT_TIMES`` times or more ("abcabcabcabcabc");
- ``odd_codepoint``: private-use or replacement characters (U+FFFD, U+E000..U+F8FF, planes 15-16);
- ``script_mix``: letters from ``SCRIPT_MIX_MIN`` or more writing systems
  (each with at least two letters) in one short answer;
- ``empty``: nothing printable although the server says it generated tokens.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

RUN_LENGTH = 10
REPEAT_UNIT_MAX = 16
REPEAT_TIMES = 5
SCRIPT_MIX_MIN = 3
CODES = ("control", "run", "repeat", "odd_codepoint", "script_mix", "empty")

_RUN_RE = re.compile(rf"(\S)\1{{{RUN_LENGTH - 1},}}")
_REPEAT_RE = re.compile(rf"(.{{2,{REPEAT_UNIT_MAX}}}?)\1{{{REPEAT_TIMES - 1},}}", re.DOTALL)
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
# scripts that are normally written together count as one
_SCRIPT_GROUPS = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK", "CJK": "CJK"}


@dataclass(frozen=True)
class FormatProblem:
    code: str  # one of CODES
    detail: str


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return (o < 32 and ch not in _ALLOWED_CONTROLS) or o == 127 or 0x80 <= o <= 0x9F


def _is_odd(ch: str) -> bool:
    o = ord(ch)
    return o == 0xFFFD or 0xE000 <= o <= 0xF8FF or o >= 0xF0000


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    return _SCRIPT_GROUPS.get(first, first) or None


def scripts(text: str) -> dict[str, int]:
    """Letters per writing system (first word of the Unicode name; CJK scripts grouped)."""
    out: dict[str, int] = {}
    for ch in text:
        s = _script(ch)
        if s:
            out[s] = out.get(s, 0) + 1
    return out


def check_format(text: str, finish_reason: str | None = None) -> tuple[FormatProblem, ...]:
    """Every L1 problem of ``text`` (an empty tuple when it looks like text).

    ``finish_reason`` (vLLM's, when known): ``"length"`` with an empty text means tokens
    were generated that decode to nothing printable.
    """
    problems: list[FormatProblem] = []
    controls = [ch for ch in text if _is_control(ch)]
    if controls:
        shown = ", ".join(sorted({f"U+{ord(c):04X}" for c in controls})[:5])
        problems.append(FormatProblem("control", f"{len(controls)} control character(s): {shown}"))
    run = _RUN_RE.search(text)
    if run:
        problems.append(FormatProblem("run", f"{len(run.group(0))}x {run.group(1)!r}"))
    for rep in _REPEAT_RE.finditer(text):
        unit = rep.group(1)
        if not unit.strip() or len(set(unit)) == 1:  # layout whitespace; a run is reported as one
            continue
        problems.append(FormatProblem("repeat", f"{unit!r} repeated {len(rep.group(0)) // len(unit)}x"))
        break
    odd = [ch for ch in text if _is_odd(ch)]
    if odd:
        shown = ", ".join(sorted({f"U+{ord(c):04X}" for c in odd})[:5])
        problems.append(FormatProblem("odd_codepoint", f"{len(odd)} private-use/replacement character(s): {shown}"))
    mix = {s: n for s, n in scripts(text).items() if n >= 2}
    if len(mix) >= SCRIPT_MIX_MIN:
        problems.append(FormatProblem("script_mix", "letters of " + ", ".join(sorted(mix))))
    if finish_reason == "length" and not text.strip():
        problems.append(FormatProblem("empty", "tokens generated, nothing printable"))
    return tuple(problems)


def problem_codes(problems: tuple[FormatProblem, ...]) -> frozenset[str]:
    return frozenset(p.code for p in problems)

"""Parses vLLM's ``/v1/completions`` answers into what the gates judge. Pure.

Shapes (measured on vLLM 0.32): with ``logprobs: k`` a choice carries
``logprobs = {text_offset, token_logprobs, tokens, top_logprobs: [{token: logprob}, ...]}``;
with ``prompt_logprobs: 0`` it carries ``prompt_logprobs = [null, {"<id>": {"logprob",
"rank", "decoded_token"}}, ...]`` (one entry per prompt token after the first, the
prompt token's own entry first); with ``echo: true`` + ``logprobs`` the prompt's tokens
lead ``token_logprobs`` (the first one ``null``). A server that does not support these
(an old vLLM, a proxy) simply leaves them out: the parse says so, it does not fail.

Every malformed shape raises ``AnswerError`` with what was wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class AnswerError(ValueError):
    """The body is not a completion answer of the expected shape."""


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None
    model: str | None
    has_logprobs: bool
    tokens: tuple[str, ...] = ()
    token_logprobs: tuple[float | None, ...] = ()
    top_logprobs: tuple[tuple[float, ...], ...] = ()
    top_tokens: tuple[dict[str, float], ...] = ()  # per position: token -> logprob (finite ones)
    prompt_logprobs: tuple[float | None, ...] | None = None  # None: the server gave none
    logprobs_error: str | None = None  # asked with logprobs the server failed (5xx), without it answered


def _num(x: Any, where: str) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        if isinstance(x, str) and x.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return float(x)
        raise AnswerError(f"{where}: expected a number, got {type(x).__name__}")
    return float(x)


def _choice(body: Any) -> dict:
    if not isinstance(body, dict):
        raise AnswerError(f"expected a JSON object, got {type(body).__name__}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerError("no choices[0] in the answer")
    return choices[0]


def _logprobs(
    lp: Any,
) -> tuple[tuple[str, ...], tuple[float | None, ...], tuple[tuple[float, ...], ...], tuple[dict[str, float], ...]]:
    if not isinstance(lp, dict):
        raise AnswerError("choices[0].logprobs: expected an object")
    tokens = lp.get("tokens") or []
    tlp = lp.get("token_logprobs") or []
    top = lp.get("top_logprobs") or []
    if not isinstance(tokens, list) or not isinstance(tlp, list) or not isinstance(top, list):
        raise AnswerError("choices[0].logprobs: tokens/token_logprobs/top_logprobs must be lists")
    token_lps = tuple(_num(x, f"token_logprobs[{i}]") for i, x in enumerate(tlp))
    tops: list[tuple[float, ...]] = []
    maps: list[dict[str, float]] = []
    for i, entry in enumerate(top):
        if entry is None:
            tops.append(())
            maps.append({})
            continue
        if not isinstance(entry, dict):
            raise AnswerError(f"top_logprobs[{i}]: expected an object")
        vals = tuple(_num(v, f"top_logprobs[{i}]") for v in entry.values())
        tops.append(tuple(v for v in vals if v is not None))
        maps.append({str(k): v for k, v in zip(entry, vals, strict=True) if v is not None and math.isfinite(v)})
    return tuple(str(t) for t in tokens), token_lps, tuple(tops), tuple(maps)


def _prompt_logprobs(plp: Any) -> tuple[float | None, ...]:
    if not isinstance(plp, list):
        raise AnswerError("choices[0].prompt_logprobs: expected a list")
    out: list[float | None] = []
    for i, entry in enumerate(plp):
        if entry is None:
            out.append(None)
            continue
        if not isinstance(entry, dict) or not entry:
            raise AnswerError(f"prompt_logprobs[{i}]: expected an object")
        first = next(iter(entry.values()))  # the prompt token's own entry comes first
        if isinstance(first, dict):
            out.append(_num(first.get("logprob"), f"prompt_logprobs[{i}].logprob"))
        else:
            out.append(_num(first, f"prompt_logprobs[{i}]"))
    return tuple(out)


def parse_completion(body: Any) -> Completion:
    """One completion answer (``choices[0]``)."""
    ch = _choice(body)
    text = ch.get("text")
    if not isinstance(text, str):
        raise AnswerError("choices[0].text: expected a string")
    model = body.get("model") if isinstance(body.get("model"), str) else None
    lp = ch.get("logprobs")
    tokens, tlp, top, maps = _logprobs(lp) if lp is not None else ((), (), (), ())
    plp = ch.get("prompt_logprobs")
    if plp is None:
        plp = body.get("prompt_logprobs")  # some versions put it beside choices
    return Completion(
        text=text,
        finish_reason=ch.get("finish_reason"),
        model=model,
        has_logprobs=lp is not None,
        tokens=tokens,
        token_logprobs=tlp,
        top_logprobs=top,
        top_tokens=maps,
        prompt_logprobs=_prompt_logprobs(plp) if plp is not None else None,
    )


def echo_prompt_logprobs(c: Completion, generated: int) -> tuple[float | None, ...] | None:
    """With ``echo`` the prompt's logprobs lead ``token_logprobs``; drop the ``generated`` last."""
    if not c.token_logprobs:
        return None
    lps = c.token_logprobs[:-generated] if generated else c.token_logprobs
    return lps or None


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)

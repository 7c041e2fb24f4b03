"""The simulated model's words and logprobs: deterministic, and corruptible on order.

Pure. A greedy answer depends only on (prompt, model salt), as with a real model;
known prompts answer correctly ("1+1=" -> " 2"). The logprobs have vLLM's shapes
(``logprobs``: ``tokens``, ``token_logprobs``, ``top_logprobs`` as ``{token:
logprob}`` per position, ``text_offset``; ``prompt_logprobs``: ``[null, {"<id>":
{"logprob", "rank", "decoded_token"}}, ...]``). A healthy position is peaked (top-1
about 90 %); a healthy reference text scores about -2 nats per token.

Output faults (``OUTPUT_FAULTS``), like the garbage real servers produced:

- ``repeat_chars``: every token is "!!" (vLLM #48330's repeated "!!!!!");
- ``control_chars``: control characters;
- ``wrong_answers``: fluent but wrong (known answers off by one, other prompts a
  different sequence): only L4/L5 can see it;
- ``flat_logprobs``: a flat distribution over 50k tokens and random words;
- ``nan_logprobs``: NaN logprobs;
- ``high_perplexity``: the reference text scores -8 nats per token;
- ``no_logprobs``: the server ignores ``logprobs``/``prompt_logprobs``/``echo``
  (an older vLLM or a proxy): not garbage, but nothing for L2/L3.
"""

from __future__ import annotations

import math
import random
import re
import zlib

OUTPUT_FAULTS = (
    "repeat_chars",
    "control_chars",
    "wrong_answers",
    "flat_logprobs",
    "nan_logprobs",
    "high_perplexity",
    "no_logprobs",
)
VOCAB_SIZE = 50000
WORDS = (
    " the",
    " engine",
    " steps",
    " once",
    " more",
    " and",
    " every",
    " token",
    " is",
    " a",
    " small",
    " piece",
    " of",
    " work",
    " that",
    " flows",
    " through",
    " cache",
    " blocks",
    " while",
    " model",
    " says",
    " hello",
    " world",
    " again",
    " today",
    ".",
    ",",
)
KNOWN = {"1+1=": [" 2"], "2+2=": [" 4"], "The capital of France is": [" Paris", "."]}
WRONG = {"1+1=": [" 3"], "2+2=": [" 5"], "The capital of France is": [" Berlin", "."]}
_PEAKED = (-0.15, -2.8, -3.5, -4.2, -5.0, -5.5, -6.0, -6.5, -7.0, -7.5)
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def _rng(prompt: str, salt: str) -> random.Random:
    return random.Random(zlib.crc32(f"{salt}\x1f{prompt}".encode()))


def greedy_tokens(prompt: str, n: int, salt: str = "", faults: frozenset[str] = frozenset()) -> list[str]:
    if "repeat_chars" in faults:
        return ["!!"] * n
    if "control_chars" in faults:
        return [("\x00", "\x07", "\x1b", "\x01")[i % 4] for i in range(n)]
    wrong = "wrong_answers" in faults
    if "flat_logprobs" in faults:
        salt, wrong = salt + "/flat", False
    lead = (WRONG if wrong else KNOWN).get(prompt, [])
    rng = _rng(prompt, salt + ("/wrong" if wrong else ""))
    out = list(lead[:n])
    while len(out) < n:
        out.append(WORDS[rng.randrange(len(WORDS))])
    return out


def _position(token: str, k: int, faults: frozenset[str], i: int) -> tuple[float, dict[str, float]]:
    if "nan_logprobs" in faults:
        return math.nan, {token: math.nan, **{f"<{j}>": math.nan for j in range(1, k)}}
    if "flat_logprobs" in faults:
        lp = -math.log(VOCAB_SIZE)
        return lp, {token: lp, **{f"<{j}>": lp for j in range(1, k)}}
    top = {token: _PEAKED[0]}
    for j in range(1, k):
        other = WORDS[(i + j * 7) % len(WORDS)]
        top[other if other not in top else f"<{j}>"] = _PEAKED[j % len(_PEAKED)]
    return _PEAKED[0], top


def completion_logprobs(
    prompt: str, tokens: list[str], k: int, faults: frozenset[str], echo_tokens: list[str] | None = None
) -> dict:
    """vLLM's ``choices[0].logprobs`` object for ``tokens`` (``echo_tokens`` lead it when echoing)."""
    out_tokens, lps, tops, offsets = [], [], [], []
    offset = 0
    for i, tok in enumerate(echo_tokens or []):
        lp = None if i == 0 else prompt_token_logprob(i, faults)
        out_tokens.append(tok)
        lps.append(lp)
        tops.append(None if lp is None else {tok: lp})
        offsets.append(offset)
        offset += len(tok)
    for i, tok in enumerate(tokens):
        lp, top = _position(tok, max(1, k), faults, i)
        out_tokens.append(tok)
        lps.append(lp)
        tops.append(top)
        offsets.append(offset)
        offset += len(tok)
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": out_tokens, "top_logprobs": tops}


def prompt_tokens(prompt: str) -> list[str]:
    return _TOKEN_RE.findall(prompt) or [""]


def prompt_token_logprob(i: int, faults: frozenset[str]) -> float:
    if "nan_logprobs" in faults:
        return math.nan
    base = -8.0 if "high_perplexity" in faults else -2.0
    return base + 0.5 * math.sin(i)


def prompt_logprobs(prompt: str, faults: frozenset[str]) -> list:
    """vLLM's ``prompt_logprobs`` with 0 extra: one entry per prompt token after the first."""
    toks = prompt_tokens(prompt)
    out: list = [None]
    for i, tok in enumerate(toks[1:], start=1):
        out.append(
            {
                str(100 + zlib.crc32(tok.encode()) % 30000): {
                    "logprob": prompt_token_logprob(i, faults),
                    "rank": 1,
                    "decoded_token": tok,
                }
            }
        )
    return out

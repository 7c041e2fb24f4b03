"""L4 shadow consistency: fingerprints of greedy answers compared across instances. Pure.

A *fingerprint* is a short hash of (model, vLLM version, prompt, normalized answer),
so instances only ever compare like with like and a fingerprint can travel between
nodes without carrying the text. ``judge`` decides one instance's round from its own
fingerprints, its peers' (same model and version, fresh) and its own baseline:

- with peers: per prompt, the instance *disagrees* when a strict majority of all
  instances (itself included) agrees on another fingerprint and at least two peers
  form that majority; when it is in the majority it agrees. An even split (no strict
  majority) is decided by the instance's own baseline when it has one
  (a match agrees, a mismatch disagrees); without a baseline the round is ``ambiguous``:
  something is wrong, nobody can say who — alert only, never a restart;
- alone: each answer against its own baseline fingerprint (no baseline: not judged).

The instance fails the round when any prompt disagrees.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from vllm_guardian.gates.known_answers import normalize

AGREE, DISAGREE, AMBIGUOUS, UNJUDGED = "agree", "disagree", "ambiguous", "unjudged"


@dataclass(frozen=True)
class AgreementVerdict:
    status: str  # agree | disagree | ambiguous | unjudged
    disagreeing: tuple[str, ...] = ()  # prompts whose answer is the odd one out
    peers: int = 0
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in (DISAGREE, AMBIGUOUS)


def near_tie_flip(
    tokens: Sequence[str], top_tokens: Sequence[Mapping[str, float]], ref_tokens: Sequence[str], margin: float
) -> tuple[int, float] | None:
    """Where a greedy answer leaves a reference answer at a near tie: ``(position, gap)`` when,
    at the first token that differs, the reference's token is in this answer's top-k within
    ``margin`` nats of the chosen one (batched numerics may pick either); None otherwise."""
    n = min(len(tokens), len(ref_tokens))
    i = next((k for k in range(n) if tokens[k] != ref_tokens[k]), None)
    if i is None or i >= len(top_tokens):
        return None
    chosen, ref = top_tokens[i].get(tokens[i]), top_tokens[i].get(ref_tokens[i])
    if chosen is None or ref is None:
        return None
    gap = chosen - ref
    return (i, gap) if gap <= margin else None


def fingerprint(model: str, version: str, prompt: str, answer: str) -> str:
    h = hashlib.sha256("\x1f".join((model, version, prompt, normalize(answer))).encode("utf-8"))
    return h.hexdigest()[:16]


def _judge_prompt(own: str, peer_fps: Sequence[str], baseline: str | None) -> str:
    if not peer_fps:
        if baseline is None:
            return UNJUDGED
        return AGREE if own == baseline else DISAGREE
    votes = Counter([own, *peer_fps])
    top, n = votes.most_common(1)[0]
    total = len(peer_fps) + 1
    if 2 * n > total:  # a strict majority exists
        if top == own:
            return AGREE
        if n >= 2:
            return DISAGREE
    if baseline is not None:
        return AGREE if own == baseline else DISAGREE
    return AMBIGUOUS


def judge(
    own: Mapping[str, str], peers: Sequence[Mapping[str, str]], baseline: Mapping[str, str] | None
) -> AgreementVerdict:
    """``own``/``peers``/``baseline``: prompt -> fingerprint. Peers lacking a prompt do not vote on it."""
    results: dict[str, str] = {}
    for prompt, fp in own.items():
        peer_fps = [p[prompt] for p in peers if prompt in p]
        results[prompt] = _judge_prompt(fp, peer_fps, (baseline or {}).get(prompt))
    odd = tuple(p for p, r in results.items() if r == DISAGREE)
    unsure = tuple(p for p, r in results.items() if r == AMBIGUOUS)
    if odd:
        return AgreementVerdict(
            DISAGREE,
            odd,
            len(peers),
            f"{len(odd)} of {len(results)} answer(s) differ from "
            + ("the agreeing peers" if peers else "this instance's baseline"),
        )
    if unsure:
        return AgreementVerdict(
            AMBIGUOUS,
            unsure,
            len(peers),
            f"{len(unsure)} answer(s) split evenly with {len(peers)} peer(s), no baseline",
        )
    if results and all(r == UNJUDGED for r in results.values()):
        return AgreementVerdict(UNJUDGED, (), 0, "no peer and no baseline yet")
    return AgreementVerdict(AGREE, (), len(peers))

"""L4 of one round, judged: this instance's shadow fingerprints against its local and remote
peers and its baseline -> the round's L4 failures. Pure (no I/O, no clock).

``judge_round`` (``gates.judge``) fingerprints every answer; here the *shadow* answers vote:

- an answer that left the baseline at a near tie (``RoundVerdict.tie_flips``) does not vote;
- local peers are this node's other instances of the same model and version whose latest
  fingerprints are at most ``max_age`` seconds old (``fresh_local_peers``); remote peers are
  other nodes' (``gates.exchange``);
- ``agreement.judge`` decides; each disagreeing prompt is one ``GateFailure("L4", status, ...)``
  expecting the agreeing peers' answer (a disagreement with peers) or the baseline's;
- a failure that only the remote peers make (judged without them, the instance agrees on that
  prompt) is ``source="peers"``: external evidence, a hint that never restarts alone
  (``remediation/external.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vllm_guardian.gates import agreement
from vllm_guardian.gates.baseline import Baseline
from vllm_guardian.gates.judge import EXCERPT, GateFailure, RoundAnswers, RoundVerdict

Fingerprints = Mapping[str, str]  # prompt -> fingerprint


@dataclass(frozen=True)
class LocalPeer:
    """The latest shadow fingerprints of one instance on this node."""

    model: str
    version: str
    fingerprints: Fingerprints
    at: float  # monotonic time of its round


@dataclass(frozen=True)
class L4Verdict:
    """What L4 says about one round."""

    agreement: str  # the status line: "agree (2 peer(s))"
    judged: bool  # False: no peer and no baseline yet
    ambiguous: bool  # an even split nobody can decide: alert only
    failures: tuple[GateFailure, ...]
    own: Fingerprints  # the fingerprints this instance votes with (its local peers read them next)


def shared_fingerprints(ra: RoundAnswers) -> dict[str, str]:
    """Every shadow answer's fingerprint: what this instance publishes to other nodes."""
    fp = agreement.fingerprint
    return {a.prompt: fp(ra.model, ra.version, a.prompt, a.text) for a in ra.answers if a.role == "shadow"}


def voting_fingerprints(ra: RoundAnswers, verdict: RoundVerdict) -> dict[str, str]:
    """The shadow answers' fingerprints, near-tie flips left out (they do not vote)."""
    return {
        a.prompt: verdict.fingerprints[a.prompt]
        for a in ra.answers
        if a.role == "shadow" and a.prompt not in verdict.tie_flips
    }


def fresh_local_peers(
    local: Mapping[str, LocalPeer], target: str, model: str, version: str, now: float, max_age: float
) -> list[Fingerprints]:
    """This node's other instances of ``model`` ``version`` seen at most ``max_age`` ago."""
    return [
        peer.fingerprints
        for name, peer in local.items()
        if name != target and (peer.model, peer.version) == (model, version) and now - peer.at <= max_age
    ]


def judge_l4(
    ra: RoundAnswers,
    verdict: RoundVerdict,
    baseline: Baseline | None,
    local: Sequence[Fingerprints],
    remote: Sequence[Fingerprints],
) -> L4Verdict:
    """L4 of ``ra`` (judged by ``judge_round`` as ``verdict``) against ``local`` and ``remote`` peers."""
    own = voting_fingerprints(ra, verdict)
    base_fps = {p: baseline.fingerprints[p] for p in own if baseline and p in baseline.fingerprints} or None
    v4 = agreement.judge(own, [*local, *remote], base_fps)
    line = f"{v4.status} ({v4.peers} peer(s))"
    judged = v4.status != agreement.UNJUDGED
    if not v4.failed:
        return L4Verdict(line, judged, False, (), own)
    texts = {a.prompt: a.text for a in ra.answers}
    # without the other nodes' fingerprints, does this instance still fail the prompt?
    on_own = set(agreement.judge(own, local, base_fps).disagreeing) if remote else None
    failures = tuple(
        GateFailure(
            "L4",
            v4.status,
            prompt,
            texts.get(prompt, "")[:EXCERPT],
            _expected(v4, prompt, baseline),
            {"peers": v4.peers, "detail": v4.detail},
            source="own" if on_own is None or prompt in on_own else "peers",
        )
        for prompt in v4.disagreeing
    )
    return L4Verdict(line, judged, v4.status == agreement.AMBIGUOUS, failures, own)


def _expected(v4: agreement.AgreementVerdict, prompt: str, baseline: Baseline | None) -> str:
    if v4.status == agreement.DISAGREE and v4.peers:
        return "the answer of the agreeing peers"
    return baseline.answers.get(prompt, "?") if baseline else "?"

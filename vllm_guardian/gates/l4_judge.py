"""L4 of one round, judged: this instance's shadow fingerprints against its local and remote
peers and its baseline -> the round's L4 failures. Pure (no I/O, no clock).

``judge_round`` (``gates.judge``) fingerprints every answer; here the *shadow* answers vote:

- an answer that left the baseline at a near tie (``RoundVerdict.tie_flips``) does not vote;
- local peers are this node's other instances of the same model and version whose latest
  fingerprints are at most ``max_age`` seconds old (``fresh_local_peers``), split by who named
  them: *configured* targets (the operator's) and *autodiscovered* ones (any process that owns a
  socket and answers like vLLM: anyone on the node can start one); remote peers are other
  nodes' (``gates.exchange``);
- a configured target is judged against configured local peers, remote peers and its baseline
  only: autodiscovered servers never vote on it (two of them agreeing on another answer once
  outvoted a healthy configured server and made it the suspect of an own condition C);
- ``agreement.judge`` decides; each disagreeing prompt is one ``GateFailure("L4", status, ...)``
  expecting the agreeing peers' answer (a disagreement with peers) or the baseline's;
- what a failure rests on (``source``): ``own`` when it holds against the configured local peers
  and the baseline alone; else ``peers`` when it holds with the remote peers added; else
  ``local_peers`` (only autodiscovered servers' votes make it). ``peers`` and ``local_peers`` are
  external evidence, a hint that never restarts alone (``remediation/external.py``).
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
    configured: bool = False  # a target of the config (its answers are the guardian's own evidence)


@dataclass(frozen=True)
class LocalVotes:
    """This node's fresh peers of one instance, by who named them."""

    configured: tuple[Fingerprints, ...] = ()  # targets of the config: the guardian's own evidence
    discovered: tuple[Fingerprints, ...] = ()  # autodiscovered: external evidence, unauthenticated


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
) -> LocalVotes:
    """This node's other instances of ``model`` ``version`` seen at most ``max_age`` ago."""
    fresh = [
        peer
        for name, peer in local.items()
        if name != target and (peer.model, peer.version) == (model, version) and now - peer.at <= max_age
    ]
    return LocalVotes(
        tuple(p.fingerprints for p in fresh if p.configured),
        tuple(p.fingerprints for p in fresh if not p.configured),
    )


def judge_l4(
    ra: RoundAnswers,
    verdict: RoundVerdict,
    baseline: Baseline | None,
    local: LocalVotes,
    remote: Sequence[Fingerprints],
    configured: bool,
) -> L4Verdict:
    """L4 of ``ra`` (judged by ``judge_round`` as ``verdict``) against ``local`` and ``remote`` peers;
    ``configured``: the instance is a target of the config (autodiscovered peers do not vote on it)."""
    own = voting_fingerprints(ra, verdict)
    base_fps = {p: baseline.fingerprints[p] for p in own if baseline and p in baseline.fingerprints} or None
    trusted = list(local.configured)
    discovered = [] if configured else list(local.discovered)
    v4 = agreement.judge(own, [*trusted, *discovered, *remote], base_fps)
    line = f"{v4.status} ({v4.peers} peer(s))"
    judged = v4.status != agreement.UNJUDGED
    if not v4.failed:
        return L4Verdict(line, judged, False, (), own)
    texts = {a.prompt: a.text for a in ra.answers}
    # does this instance still fail the prompt on its own evidence, or with the other nodes added?
    failing = set(v4.disagreeing)
    on_own = set(agreement.judge(own, trusted, base_fps).disagreeing) if discovered or remote else failing
    on_nodes = set(agreement.judge(own, [*trusted, *remote], base_fps).disagreeing) if discovered else failing
    failures = tuple(
        GateFailure(
            "L4",
            v4.status,
            prompt,
            texts.get(prompt, "")[:EXCERPT],
            _expected(v4, prompt, baseline),
            {"peers": v4.peers, "detail": v4.detail},
            source="own" if prompt in on_own else "peers" if prompt in on_nodes else "local_peers",
        )
        for prompt in v4.disagreeing
    )
    return L4Verdict(line, judged, v4.status == agreement.AMBIGUOUS, failures, own)


def _expected(v4: agreement.AgreementVerdict, prompt: str, baseline: Baseline | None) -> str:
    if v4.status == agreement.DISAGREE and v4.peers:
        return "the answer of the agreeing peers"
    return baseline.answers.get(prompt, "?") if baseline else "?"

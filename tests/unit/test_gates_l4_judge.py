"""L4 of one round: this instance's shadow fingerprints against its peers and its baseline."""

from __future__ import annotations

import pytest

from vllm_guardian.gates.baseline import Baseline
from vllm_guardian.gates.judge import GateAnswer, RoundAnswers, RoundVerdict
from vllm_guardian.gates.l4_judge import LocalPeer, LocalVotes, fresh_local_peers, judge_l4, shared_fingerprints

P = "The capital of France is"
OWN, OTHER = "a" * 16, "b" * 16
PEERS = "the answer of the agreeing peers"


def round_of(*prompts: str, role: str = "shadow") -> RoundAnswers:
    answers = tuple(GateAnswer(role, p, f" answer to {p}", "length", True) for p in prompts)
    return RoundAnswers("llm", "m", "0.32.0", 1000.0, answers)


def verdict(fps: dict[str, str], tie_flips: frozenset[str] = frozenset()) -> RoundVerdict:
    return RoundVerdict((), frozenset(), fps, tie_flips=tie_flips)


def baseline(fp: str | None) -> Baseline | None:
    if fp is None:
        return None
    return Baseline("llm", "m", "0.32.0", 0.0, answers={P: " Paris"}, fingerprints={P: fp})


@pytest.mark.parametrize(
    "base, local, remote, line, judged, ambiguous, failures",
    [
        # (baseline fp, configured local peers' fp, remote peers' fp) -> status line, judged, ambiguous,
        # (check, expected, source)
        (None, [], [], "unjudged (0 peer(s))", False, False, []),
        (OWN, [], [], "agree (0 peer(s))", True, False, []),
        (OTHER, [], [], "disagree (0 peer(s))", True, False, [("disagree", " Paris", "own")]),
        (None, [OTHER, OTHER], [], "disagree (2 peer(s))", True, False, [("disagree", PEERS, "own")]),
        (OWN, [], [OTHER, OTHER], "disagree (2 peer(s))", True, False, [("disagree", PEERS, "peers")]),
        (OWN, [OTHER], [OTHER], "disagree (2 peer(s))", True, False, [("disagree", PEERS, "peers")]),
        (None, [OTHER], [OTHER], "disagree (2 peer(s))", True, False, [("disagree", PEERS, "own")]),  # split alone
        (None, [OTHER, OTHER], [OTHER], "disagree (3 peer(s))", True, False, [("disagree", PEERS, "own")]),
        (None, [OTHER], [], "ambiguous (1 peer(s))", True, True, [("ambiguous", "?", "own")]),
        (None, [OWN, OWN], [OTHER], "agree (3 peer(s))", True, False, []),
    ],
)
def test_l4_verdict_of_one_shadow_answer(base, local, remote, line, judged, ambiguous, failures):
    votes = LocalVotes(configured=tuple({P: f} for f in local))
    for configured in (True, False):  # configured local peers vote the same on every instance
        v = judge_l4(round_of(P), verdict({P: OWN}), baseline(base), votes, [{P: f} for f in remote], configured)
        assert (v.agreement, v.judged, v.ambiguous) == (line, judged, ambiguous)
        assert [(f.check, f.expected, f.source) for f in v.failures] == failures
        assert all(f.level == "L4" and f.prompt == P and f.output == f" answer to {P}" for f in v.failures)


@pytest.mark.parametrize(
    "base, configured, discovered, remote, line, failures",
    [
        # an instance of the config: autodiscovered servers do not vote on it at all
        (OWN, [], [OTHER, OTHER], [], "agree (0 peer(s))", []),
        (None, [], [OTHER, OTHER], [], "unjudged (0 peer(s))", []),
        (None, [OWN], [OTHER, OTHER, OTHER], [], "agree (1 peer(s))", []),
        (OWN, [], [OTHER, OTHER], [OTHER, OTHER], "disagree (2 peer(s))", [("disagree", "peers")]),
        (OTHER, [], [OWN, OWN], [], "disagree (0 peer(s))", [("disagree", "own")]),  # nor vouch for it
    ],
)
def test_autodiscovered_local_servers_never_vote_on_a_configured_instance(
    base, configured, discovered, remote, line, failures
):
    votes = LocalVotes(tuple({P: f} for f in configured), tuple({P: f} for f in discovered))
    v = judge_l4(round_of(P), verdict({P: OWN}), baseline(base), votes, [{P: f} for f in remote], configured=True)
    assert v.agreement == line
    assert [(f.check, f.source) for f in v.failures] == failures


@pytest.mark.parametrize(
    "base, configured, discovered, remote, line, failures",
    [
        # an autodiscovered instance: their votes count, but a failure only they make is external
        (OWN, [], [OTHER, OTHER], [], "disagree (2 peer(s))", [("disagree", "local_peers")]),
        (None, [], [OTHER, OTHER], [], "disagree (2 peer(s))", [("disagree", "local_peers")]),
        (None, [OTHER, OTHER], [OTHER], [], "disagree (3 peer(s))", [("disagree", "own")]),
        (OWN, [], [OTHER], [OTHER, OTHER], "disagree (3 peer(s))", [("disagree", "peers")]),
        (OWN, [OTHER], [OTHER], [], "disagree (2 peer(s))", [("disagree", "local_peers")]),
        # their agreement still counts as agreement (as the peers' majority does everywhere):
        # hiding a change is the safe side, and autodiscovered servers are never restarted
        (OTHER, [], [OWN, OWN], [], "agree (2 peer(s))", []),
    ],
)
def test_a_failure_only_autodiscovered_local_servers_make_is_external(
    base, configured, discovered, remote, line, failures
):
    votes = LocalVotes(tuple({P: f} for f in configured), tuple({P: f} for f in discovered))
    v = judge_l4(round_of(P), verdict({P: OWN}), baseline(base), votes, [{P: f} for f in remote], configured=False)
    assert v.agreement == line
    assert [(f.check, f.source) for f in v.failures] == failures


def test_a_near_tie_flip_does_not_vote_and_is_not_shared_as_a_vote():
    votes = LocalVotes(configured=({P: OTHER, "q": OWN},) * 2)
    v = judge_l4(round_of(P, "q"), verdict({P: OWN, "q": OWN}, frozenset({P})), None, votes, [], True)
    assert dict(v.own) == {"q": OWN} and v.failures == ()


def test_only_shadow_answers_vote():
    v = judge_l4(round_of(P, role="diagnostic"), verdict({P: OWN}), baseline(OTHER), LocalVotes(), [], True)
    assert dict(v.own) == {} and v.failures == ()


def test_every_shadow_answer_is_published_with_its_fingerprint():
    ra = round_of(P, "q")
    assert sorted(shared_fingerprints(ra)) == [P, "q"]
    assert shared_fingerprints(ra) != shared_fingerprints(RoundAnswers("llm", "m", "0.33.0", 0.0, ra.answers))


@pytest.mark.parametrize(
    "name, model, version, at, counted",
    [
        ("other", "m", "v", 95.0, True),
        ("self", "m", "v", 95.0, False),  # the instance itself
        ("other", "m", "v2", 95.0, False),  # another vLLM version
        ("other", "m2", "v", 95.0, False),  # another model
        ("other", "m", "v", 80.0, True),  # exactly max_age old
        ("other", "m", "v", 79.0, False),  # older than max_age
    ],
)
def test_local_peers_are_fresh_instances_of_the_same_model_and_version(name, model, version, at, counted):
    local = {name: LocalPeer(model, version, {P: OTHER}, at)}
    votes = fresh_local_peers(local, "self", "m", "v", now=100.0, max_age=20.0)
    assert votes == LocalVotes(discovered=(({P: OTHER},) if counted else ()))


def test_local_peers_are_split_by_who_named_them():
    local = {
        "a": LocalPeer("m", "v", {P: OWN}, 100.0, configured=True),
        "vllm-8001": LocalPeer("m", "v", {P: OTHER}, 100.0),
    }
    assert fresh_local_peers(local, "self", "m", "v", 100.0, 20.0) == LocalVotes(({P: OWN},), ({P: OTHER},))

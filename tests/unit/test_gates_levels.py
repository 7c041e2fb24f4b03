"""The pure gate levels: L1 format, L2 perplexity, L3 distribution, L4 agreement, L5 known answers."""

from __future__ import annotations

import math

import pytest

from vllm_guardian.gates import agreement, distribution, known_answers, perplexity
from vllm_guardian.gates.format_check import check_format, problem_codes

# ------------------------------------------------------------------ L1


@pytest.mark.parametrize(
    "text, codes",
    [
        ("The answer is 2.", set()),
        ("Line one\nline two\tindented\r\n", set()),
        ("Ünïcödé façade, naïve café", set()),
        ("日本語のテキストとカタカナ", set()),  # CJK scripts written together count as one
        ("x = 1  # comment          more", set()),  # a run of spaces is layout, not garbage
        ("!!!!!!!!!!", {"run"}),
        ("ok!!!!!!!!!!!!!!!!!! then", {"run"}),
        ("!!!!!!!!!", set()),  # nine is not ten
        ("bad\x00byte", {"control"}),
        ("bell\x07 and \x1b[0m", {"control"}),
        ("c1\x85control", {"control"}),
        ("abcabcabcabcabc", {"repeat"}),
        ("the the the the the the", {"repeat"}),
        ("abcabcabc", set()),  # three times is not many
        ("\ufffd\ufffd", {"odd_codepoint"}),
        ("private \ue000 use", {"odd_codepoint"}),
        ("Hello Привет Γειά", {"script_mix"}),
        ("Hello Привет", set()),  # two scripts can be a translation
    ],
)
def test_format_problems(text, codes):
    assert problem_codes(check_format(text)) == codes


def test_empty_answer_is_a_problem_only_when_tokens_were_generated():
    assert problem_codes(check_format("  ", "length")) == {"empty"}
    assert check_format("", "stop") == ()


def test_a_run_is_not_reported_again_as_a_repeat():
    assert [p.code for p in check_format("a" * 30)] == ["run"]


def test_problem_detail_names_what_was_found():
    (p,) = check_format("x\x07y")
    assert "U+0007" in p.detail


# ------------------------------------------------------------------ L2


@pytest.mark.parametrize(
    "logprobs, expected",
    [
        ([None, -1.0, -1.0], math.e),
        ([None, 0.0, 0.0], 1.0),
        ([None], None),
        ([], None),
        ([None, -1.0, float("nan")], math.inf),
        ([None, float("-inf")], math.inf),
        ([None, -800.0], math.inf),  # overflow reads as infinite, not an exception
    ],
)
def test_perplexity(logprobs, expected):
    got = perplexity.perplexity(logprobs)
    assert got == expected or (expected is not None and got == pytest.approx(expected))


@pytest.mark.parametrize(
    "value, baseline, ok",
    [
        (10.0, 10.0, True),
        (29.9, 10.0, True),
        (30.0, 10.0, True),
        (30.1, 10.0, False),
        (math.inf, 10.0, False),
    ],
)
def test_perplexity_judged_against_factor_times_baseline(value, baseline, ok):
    assert perplexity.judge(value, baseline, 3.0).ok is ok


def test_perplexity_baseline_is_the_median_of_finite_samples():
    assert perplexity.baseline_of([12.0, 10.0, 50.0, math.inf]) == 12.0
    assert perplexity.baseline_of([math.nan]) is None


# ------------------------------------------------------------------ L3

PEAKED = [-0.05, -3.5, -4.0, -5.0, -6.0]
FLAT = [-math.log(50000)] * 5  # all tokens equally likely in a 50k vocabulary


@pytest.mark.parametrize(
    "token_lps, tops, codes",
    [
        ([-0.05, -0.1], [PEAKED, PEAKED], set()),
        ([-0.05, math.nan], [PEAKED, PEAKED], {"non_finite"}),
        ([-0.05, -0.1], [PEAKED, [math.nan] * 5], {"non_finite"}),
        ([-0.05, -0.1], [PEAKED, [-0.1, math.inf, -2, -3, -4]], {"non_finite"}),
        ([FLAT[0]] * 2, [FLAT, FLAT], {"entropy"}),
        ([-0.01], [[-0.01, -0.01, -0.01]], {"mass"}),  # three tokens of ~99 %: not a distribution
        ([None], [[]], set()),  # nothing to judge
    ],
)
def test_distribution_problems(token_lps, tops, codes):
    problems, _ = distribution.check_distribution(token_lps, tops)
    assert {p.code for p in problems} == codes


def test_a_random_small_vocabulary_is_not_flat_enough_to_fail():
    near_uniform_300 = [-math.log(300) + d for d in (0.3, 0.2, 0.1, 0.0, -0.1)]
    problems, fig = distribution.check_distribution([near_uniform_300[0]], [near_uniform_300])
    assert problems == () and fig.mean_entropy == pytest.approx(math.log(300), abs=0.5)


def test_low_top1_with_low_entropy_cannot_come_from_a_softmax():
    problems, _ = distribution.check_distribution([-4.0], [[-4.0]], min_top1=0.05, low_entropy=10.0)
    assert {p.code for p in problems} == {"low_top1"}


def test_entropy_of_a_flat_distribution_reads_as_log_vocabulary():
    assert distribution.position_entropy(FLAT) == pytest.approx(math.log(50000), rel=1e-6)


# ------------------------------------------------------------------ L4

A, B, C = "fp-a", "fp-b", "fp-c"


@pytest.mark.parametrize(
    "own, peers, baseline, status",
    [
        ({"p": A}, [{"p": A}, {"p": A}], None, "agree"),
        ({"p": B}, [{"p": A}, {"p": A}], None, "disagree"),  # the odd one out is the suspect
        ({"p": A}, [{"p": B}, {"p": A}], None, "agree"),  # in the majority: never the suspect
        ({"p": A}, [{"p": B}], None, "ambiguous"),  # two instances split, no baseline
        ({"p": A}, [{"p": B}], {"p": A}, "agree"),  # split: own baseline decides
        ({"p": B}, [{"p": A}], {"p": A}, "disagree"),
        ({"p": A}, [{"p": B}, {"p": C}], None, "ambiguous"),  # three-way split, nobody agrees
        ({"p": A}, [], {"p": A}, "agree"),  # alone: against its own baseline
        ({"p": B}, [], {"p": A}, "disagree"),
        ({"p": A}, [], None, "unjudged"),
        ({"p": A, "q": A}, [{"q": B}, {"q": B}], None, "disagree"),  # peers without a prompt do not vote
    ],
)
def test_agreement(own, peers, baseline, status):
    assert agreement.judge(own, peers, baseline).status == status


def test_fingerprints_separate_model_version_and_prompt_but_not_whitespace():
    fp = agreement.fingerprint
    assert fp("m", "v", "p", " two  words ") == fp("m", "v", "p", "two words")
    assert len({fp("m", "v", "p", "x"), fp("m2", "v", "p", "x"), fp("m", "v2", "p", "x"), fp("m", "v", "p2", "x")}) == 4


# ------------------------------------------------------------------ L5


@pytest.mark.parametrize(
    "answer, expect, base, ok",
    [
        (" 2", r"^\s*2", None, True),
        (" 3", r"^\s*2", None, False),
        ("x 2", r"^\s*2", None, False),
        ("abc", "baseline", "abc", True),
        (" abc ", "baseline", "abc", True),
        ("abd", "baseline", "abc", False),
        ("abc", "baseline", None, None),  # no baseline yet: not judged
    ],
)
def test_known_answers(answer, expect, base, ok):
    assert known_answers.check_expectation(answer, expect, base).ok is ok


# ------------------------------------------------------------------ near-tie flips (batched greedy)
@pytest.mark.parametrize(
    "tokens, tops, ref, expected",
    [
        (["a", "b"], [{"a": -1.0}, {"b": -1.00, "c": -1.01}], ["a", "c"], (1, pytest.approx(0.01))),  # near tie
        (["a", "b"], [{"a": -1.0}, {"b": -0.5, "c": -3.0}], ["a", "c"], None),  # a real preference: not a tie
        (["a", "b"], [{"a": -1.0}, {"b": -0.5}], ["a", "c"], None),  # the reference's token not even in the top-k
        (["a", "b"], [{"a": -1.0}, {"b": -0.5}], ["a", "b"], None),  # no difference
        (["a"], [], ["b"], None),  # no logprobs
    ],
)
def test_near_tie_flip(tokens, tops, ref, expected):
    assert agreement.near_tie_flip(tokens, tops, ref, 0.05) == expected

"""A gate round judged against the target's baseline; how the baseline grows; vLLM answer shapes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates.baseline import Baseline
from vllm_guardian.gates.judge import GateAnswer, RoundAnswers, judge_round, next_baseline
from vllm_guardian.gates.vllm_answers import AnswerError, echo_prompt_logprobs, parse_completion

CFG = GatesConfig()
PEAKED = (-0.05, -3.5, -4.0, -5.0, -6.0)


def ans(
    text: str,
    prompt: str = "1+1=",
    role: str = "diagnostic",
    expect: str | None = r"^\s*2",
    tops=(PEAKED, PEAKED),
    token_lps=(-0.05, -0.05),
    has_logprobs=True,
) -> GateAnswer:
    return GateAnswer(role, prompt, text, "length", has_logprobs, token_lps, tops, expect)


def answers(*a: GateAnswer, ref=(None, -2.0, -2.0)) -> RoundAnswers:
    return RoundAnswers("llm", "m", "0.32.0", 1000.0, tuple(a), ref)


def baseline(**kw: Any) -> Baseline:
    d: dict[str, Any] = dict(
        answers={"1+1=": " 2"}, fingerprints={}, format_codes={"1+1=": ()}, perplexities=(math.e**2,) * 3
    )
    d.update(kw)
    return Baseline("llm", "m", "0.32.0", 0.0, **d)


def levels(v) -> list[tuple[str, str]]:
    return sorted((f.level, f.check) for f in v.failures)


@pytest.mark.parametrize(
    "answer, ref, expected",
    [
        (ans(" 2"), (None, -2.0, -2.0), []),
        (ans("!!!!!!!!!!!!"), (None, -2.0, -2.0), [("L1", "run"), ("L5", "expect")]),
        (ans(" 3"), (None, -2.0, -2.0), [("L5", "expect")]),
        (ans(" 2", token_lps=(math.nan, -0.1)), (None, -2.0, -2.0), [("L3", "non_finite")]),
        (ans(" 2"), (None, -6.0, -6.0), [("L2", "perplexity")]),  # e^6 > 3 x e^2
        (ans(" 2"), (None, -3.0, -3.0), []),  # e^3 < 3 x e^2
    ],
)
def test_round_failures(answer, ref, expected):
    assert levels(judge_round(answers(answer, ref=ref), baseline(), CFG)) == expected


def test_a_format_problem_the_healthy_answer_already_had_is_not_a_failure():
    b = baseline(answers={"1+1=": "\x0b8>"}, format_codes={"1+1=": ("control",)})
    v = judge_round(answers(ans("\x0b8>", expect="baseline")), b, CFG)
    assert v.failures == () and {"L1", "L5"} <= v.judged


def test_a_new_kind_of_format_problem_still_fails():
    b = baseline(answers={"1+1=": "\x0b8>"}, format_codes={"1+1=": ("control",)})
    v = judge_round(answers(ans("\x0b" + "8" * 12, expect="baseline")), b, CFG)
    assert levels(v) == [("L1", "run"), ("L5", "expect")]


def test_without_a_baseline_l2_and_expect_baseline_are_not_judged():
    v = judge_round(answers(ans("anything", expect="baseline")), None, CFG)
    assert "L2" not in v.judged and "L5" not in v.judged
    assert "L2 baseline 0/3" in v.notes


def test_a_server_without_logprobs_is_judged_on_l1_l5_only_and_says_so():
    v = judge_round(answers(ans(" 2", has_logprobs=False, tops=(), token_lps=()), ref=None), baseline(), CFG)
    assert v.failures == () and "L3" not in v.judged and "L2" not in v.judged
    assert any("no logprobs" in n for n in v.notes)


def test_the_l2_failure_carries_its_figures():
    (f,) = judge_round(answers(ans(" 2"), ref=(None, -6.0)), baseline(), CFG).failures
    assert f.figures["baseline"] == pytest.approx(math.e**2, rel=1e-3)
    assert f.figures["ratio"] == pytest.approx(math.e**4, rel=1e-3)


def test_the_baseline_is_created_from_the_first_round_without_l3_failure():
    ra = answers(ans("\x0b8>", expect="baseline"))
    b = next_baseline(ra, judge_round(ra, None, CFG), None, CFG)
    assert b is not None
    assert b.answers == {"1+1=": "\x0b8>"} and b.format_codes == {"1+1=": ("control",)}
    assert b.perplexities == pytest.approx((math.e**2,))


def test_no_baseline_from_a_round_with_an_l3_failure_or_an_incomplete_round():
    ra = answers(ans(" 2", token_lps=(math.nan,)))
    assert next_baseline(ra, judge_round(ra, None, CFG), None, CFG) is None
    ra = RoundAnswers("llm", "m", "v", 0.0, (ans(" 2"),), None, ("timeout",), complete=False)
    assert next_baseline(ra, judge_round(ra, None, CFG), None, CFG) is None


def test_the_baseline_takes_perplexities_until_it_has_enough_then_stays():
    b = baseline(perplexities=(7.0,))
    ra = answers(ans(" 2"), ref=(None, -2.0))
    b2 = next_baseline(ra, judge_round(ra, b, CFG), b, CFG)
    assert b2 is not None and len(b2.perplexities) == 2
    full = baseline()
    assert next_baseline(ra, judge_round(ra, full, CFG), full, CFG) is None


def test_a_prompt_configured_later_joins_the_baseline():
    b = baseline()
    ra = answers(ans(" 2"), ans("x", prompt="new", expect="baseline"))
    b2 = next_baseline(ra, judge_round(ra, b, CFG), b, CFG)
    assert b2 is not None and b2.answers["new"] == "x" and "new" in b2.fingerprints


# ------------------------------------------------------------------ vLLM shapes (measured on 0.32)


LOGPROBS_ANSWER = {
    "id": "cmpl-1",
    "object": "text_completion",
    "model": "tiny",
    "choices": [
        {
            "index": 0,
            "text": " 2",
            "finish_reason": "length",
            "logprobs": {
                "text_offset": [4],
                "token_logprobs": [-0.1],
                "tokens": [" 2"],
                "top_logprobs": [{" 2": -0.1, " 3": -2.5}],
            },
            "prompt_logprobs": [
                None,
                {"17": {"logprob": -5.9, "rank": 173, "decoded_token": "+"}},
                {
                    "9": {"logprob": -1.5, "rank": 1, "decoded_token": "1"},
                    "3": {"logprob": -0.5, "rank": 0, "decoded_token": "x"},
                },
            ],
        }
    ],
}


def test_parse_a_vllm_answer_with_logprobs_and_prompt_logprobs():
    c = parse_completion(LOGPROBS_ANSWER)
    assert (c.text, c.model, c.finish_reason, c.has_logprobs) == (" 2", "tiny", "length", True)
    assert c.token_logprobs == (-0.1,) and c.top_logprobs == ((-0.1, -2.5),)
    assert c.prompt_logprobs == (None, -5.9, -1.5)  # the prompt token's own entry comes first


def test_parse_an_answer_without_logprobs_support():
    c = parse_completion({"choices": [{"text": "hi", "finish_reason": "stop", "logprobs": None}]})
    assert not c.has_logprobs and c.prompt_logprobs is None


def test_nan_in_logprobs_is_kept_as_nan():
    body = {
        "choices": [
            {
                "text": "x",
                "logprobs": {"tokens": ["x"], "token_logprobs": [float("nan")], "top_logprobs": [{"x": float("nan")}]},
            }
        ]
    }
    c = parse_completion(body)
    first = c.token_logprobs[0]
    assert first is not None and math.isnan(first) and math.isnan(c.top_logprobs[0][0])


def test_echo_gives_the_prompt_logprobs_before_the_generated_ones():
    c = parse_completion(
        {
            "choices": [
                {
                    "text": "ab",
                    "logprobs": {
                        "tokens": ["a", "b", "c"],
                        "token_logprobs": [None, -1.0, -2.0],
                        "top_logprobs": [None, {}, {}],
                    },
                }
            ]
        }
    )
    assert echo_prompt_logprobs(c, 1) == (None, -1.0)


@pytest.mark.parametrize(
    "body, what",
    [
        ([], "JSON object"),
        ({"choices": []}, "choices[0]"),
        ({"choices": [{"text": 3}]}, "text"),
        ({"choices": [{"text": "x", "logprobs": {"token_logprobs": ["a"]}}]}, "token_logprobs[0]"),
        ({"choices": [{"text": "x", "prompt_logprobs": [None, 5]}]}, "prompt_logprobs[1]"),
    ],
)
def test_malformed_answers_say_what_is_wrong(body, what):
    with pytest.raises(AnswerError, match=what.replace("[", r"\[").replace("]", r"\]")):
        parse_completion(body)


def test_logprobs_the_server_cannot_encode_are_an_l3_failure():
    a = GateAnswer("diagnostic", "1+1=", " 2", "length", False, expect=r"^\s*2", logprobs_error="HTTP 500: x")
    v = judge_round(answers(a), baseline(), CFG)
    assert levels(v) == [("L3", "non_finite")] and "L3" in v.judged


def test_an_answer_that_leaves_its_baseline_at_a_near_tie_is_not_a_failure():
    b = baseline(answers={"1+1=": " 2 x"}, tokens={"1+1=": (" 2", " x")}, format_codes={"1+1=": ()})
    flipped = GateAnswer(
        "diagnostic",
        "1+1=",
        " 2 \x07",
        "length",
        True,
        (-0.1, -2.0),
        (PEAKED, PEAKED),
        "baseline",
        None,
        (" 2", " \x07"),
        ({" 2": -0.1}, {" \x07": -2.0, " x": -2.02}),
    )
    v = judge_round(answers(flipped), b, CFG)
    assert v.failures == () and v.tie_flips == frozenset({"1+1="})
    assert any("near-tie flip" in n for n in v.notes)


def test_an_answer_that_leaves_its_baseline_clearly_still_fails():
    b = baseline(answers={"1+1=": " 2 x"}, tokens={"1+1=": (" 2", " x")}, format_codes={"1+1=": ()})
    wrong = GateAnswer(
        "diagnostic",
        "1+1=",
        " 2 y",
        "length",
        True,
        (-0.1, -0.2),
        (PEAKED, PEAKED),
        "baseline",
        None,
        (" 2", " y"),
        ({" 2": -0.1}, {" y": -0.2, " x": -6.0}),
    )
    assert levels(judge_round(answers(wrong), b, CFG)) == [("L5", "expect")]


def test_the_round_that_takes_the_baseline_does_not_judge_l1():
    v = judge_round(answers(ans("\x0b8>", expect="baseline")), None, CFG)  # the random model's healthy answer
    assert v.failures == () and "L1" not in v.judged

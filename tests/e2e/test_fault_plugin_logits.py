"""The fault plugin's output corruption (logits), in this venv: the decisions and the wrapping.

The tensor arithmetic itself runs inside vLLM (test_real_vllm_gates.py shows its effect).
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.vllm_fault_plugin import guardian_vllm_fault_plugin as fp


class LogitsProcessor:
    def forward(self, lm_head, hidden_states):
        return ("logits", hidden_states)


@pytest.fixture
def fdir(tmp_path):
    return fp.FaultDir(tmp_path)


@pytest.mark.parametrize("text, expected", [("", 10.0), ("3.5", 3.5), ("-1", 10.0), ("nan", 10.0), ("x", 10.0)])
def test_parse_noise_std(text, expected):
    assert fp.parse_noise_std(text) == expected


def test_install_wraps_forward_once_and_passes_logits_through_without_a_trigger(fdir):
    cls = type("LogitsProcessor", (LogitsProcessor,), {})
    c = fp.LogitsCorrupter(fdir)
    assert fp.install_logits(cls, c) == ["LogitsProcessor.forward"]
    assert fp.install_logits(cls, c) == []
    assert cls().forward(None, 7) == ("logits", 7)
    assert c.corrupted == 0 and list(fdir.path.iterdir()) == []


@pytest.mark.parametrize(
    "present, chosen",
    [
        ((), None),
        (("logits_noise",), "logits_noise"),
        (("logits_nan",), "logits_nan"),
        (("logits_noise", "logits_nan"), "logits_nan"),
        (("logits_permute",), "logits_permute"),
        (("logits_permute", "logits_noise"), "logits_noise"),
    ],
)
def test_which_output_fault_is_on(fdir, present, chosen):
    for name in present:
        (fdir.path / name).write_text("")
    assert fp.LogitsCorrupter(fdir).fault() == chosen


def test_no_logits_no_corruption(fdir):
    (fdir.path / "logits_nan").write_text("")
    assert fp.LogitsCorrupter(fdir)(None) is None


def test_engine_fault_names_are_unchanged_by_the_output_faults():
    assert fp.read_triggers(["logits_nan", "busy_loop"]) == frozenset({"busy_loop"})
    assert set(fp.OUTPUT_FAULTS).isdisjoint(fp.FAULTS)


def test_the_onset_marker_format_is_shared_with_the_engine_faults(fdir):
    assert fdir.mark_onset("logits_noise", 5.0, 99)
    assert json.loads((fdir.path / "logits_noise.onset").read_text()) == {"fault": "logits_noise", "t": 5.0, "pid": 99}


@pytest.mark.parametrize(
    "text, vocab, ids",
    [
        ("5 7 9", 10, [5, 7, 9]),
        ("5\n7 5 x 12 -1", 10, [5, 7]),  # duplicates, words, ids outside the vocabulary dropped
        ("", 4, [0, 1, 2, 3]),  # nothing named: every token
        ("3", 4, [0, 1, 2, 3]),  # one id cannot be permuted
    ],
)
def test_parse_token_ids(text, vocab, ids):
    assert fp.parse_token_ids(text, vocab) == ids


def test_the_permutation_moves_each_logit_one_place_on():
    ids = [3, 8, 11]
    source = fp.rotated(ids)
    logits = {3: 0.1, 8: 5.0, 11: 0.7}  # the model would say token 8
    permuted = {to: logits[src] for to, src in zip(ids, source, strict=True)}
    assert max(permuted, key=lambda t: permuted[t]) == 11  # ... and now says the next word
    assert sorted(permuted.values()) == sorted(logits.values())  # same distribution, other words


def test_whole_word_ids_are_a_leading_space_then_letters():
    vocab = {"\u0120the": 7, "\u0120a": 3, "the": 9, "\u01202": 4, "\u0120fox": 12, "\u0120": 1, "\u0120x!": 5}
    assert fp.whole_word_ids({"model": {"vocab": vocab}}) == [7, 12]  # one letter, digits, punctuation: out

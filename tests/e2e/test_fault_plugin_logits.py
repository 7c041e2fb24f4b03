"""The fault plugin's output corruption (logits), in this venv: the decisions and the wrapping.

The tensor arithmetic itself runs inside vLLM (test_real_vllm_gates.py shows its effect).
"""

from __future__ import annotations

import json

import pytest

import guardian_vllm_fault_plugin as fp


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

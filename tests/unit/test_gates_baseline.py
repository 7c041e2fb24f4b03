"""The baseline store: per (target, model, version), atomic, a bad file means re-baselining."""

from __future__ import annotations

import json

from vllm_guardian.gates.baseline import Baseline, BaselineStore

B = Baseline("llm", "tiny", "0.32.0", 1.0, {"1+1=": "\x0b8>"}, {"1+1=": "abc"}, {"1+1=": ("control",)}, (9.5,))


def test_a_saved_baseline_loads_back(tmp_path):
    store = BaselineStore(str(tmp_path))
    assert store.save(B) is None
    assert store.load("llm", "tiny", "0.32.0") == (B, None)
    assert not list((tmp_path / "gates").glob("*.tmp"))


def test_each_model_and_version_has_its_own_baseline(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.save(B)
    assert store.load("llm", "other-model", "0.32.0") == (None, None)
    assert store.load("llm", "tiny", "0.33.0") == (None, None)


def test_a_corrupted_file_is_a_problem_line_and_no_baseline(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.save(B)
    store.path("llm", "tiny", "0.32.0").write_text("{not json")
    b, problem = store.load("llm", "tiny", "0.32.0")
    assert b is None and problem is not None and "corrupted" in problem and "re-baselining" in problem
    assert store.save(B) is None and store.load("llm", "tiny", "0.32.0") == (B, None)


def test_a_file_of_the_wrong_shape_is_corrupted_too(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.path("llm", "tiny", "0.32.0").parent.mkdir(parents=True)
    store.path("llm", "tiny", "0.32.0").write_text('{"format": 1, "target": "llm"}')
    b, problem = store.load("llm", "tiny", "0.32.0")
    assert b is None and problem is not None and "corrupted" in problem


def test_a_json_nest_too_deep_to_parse_is_corrupted_not_raised(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.path("llm", "tiny", "0.32.0").parent.mkdir(parents=True)
    store.path("llm", "tiny", "0.32.0").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    b, problem = store.load("llm", "tiny", "0.32.0")
    assert b is None and problem is not None and "nested too deep" in problem and "re-baselining" in problem


def test_a_binary_file_is_unreadable_not_raised(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.path("llm", "tiny", "0.32.0").parent.mkdir(parents=True)
    store.path("llm", "tiny", "0.32.0").write_bytes(b"\x00\xff\xfe" * 100)
    b, problem = store.load("llm", "tiny", "0.32.0")
    assert b is None and problem is not None and "unreadable" in problem


def test_an_unwritable_state_dir_is_a_problem_line(tmp_path):
    (tmp_path / "gates").write_text("a file where the directory should be")
    problem = BaselineStore(str(tmp_path)).save(B)
    assert problem is not None and "cannot write baseline" in problem


def test_discard_removes_every_baseline_of_a_target(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.save(B)
    store.save(Baseline("llm", "tiny2", "0.32.0", 1.0))
    store.save(Baseline("other", "tiny", "0.32.0", 1.0))
    assert store.discard("llm") == 2
    assert store.load("other", "tiny", "0.32.0")[0] is not None


def test_a_baseline_written_before_tokens_were_kept_still_loads(tmp_path):
    store = BaselineStore(str(tmp_path))
    store.save(B)
    p = store.path("llm", "tiny", "0.32.0")
    data = json.loads(p.read_text())
    del data["tokens"]
    p.write_text(json.dumps(data))
    b, problem = store.load("llm", "tiny", "0.32.0")
    assert problem is None and b is not None and b.tokens == {}

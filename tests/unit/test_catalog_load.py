"""The shipped signature catalogs load, say where each entry comes from, and bad catalogs fail clearly."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.catalog_load import CatalogError, all_signatures, load_catalogs, parse_catalog

ISSUE_ENTRIES = (
    "vllm-mm-cache-lru-busy-loop",
    "app-cache-ghost-key-retry-loop",
    "vllm-mm-input-thread-died",
    "vllm-cuda-event-sync-wait",
    "vllm-flashinfer-gdn-prefill-hang",
    "vllm-shm-broadcast-stall",
    "vllm-mtp-sample-tokens-timeout",
    "vllm-xgrammar-fsm-advance",
    "vllm-kv-leak-nixl-push-abort",
    "vllm-kv-leak-lmcache",
    "vllm-kv-leak-over-length-requests",
    "vllm-worker-rpc-deserialize-leak",
    "vllm-scheduler-assertion",
    "vllm-execute-model-timeout",
)


def test_shipped_catalogs_have_a_version_and_every_entry_the_issue_lists():
    cats = load_catalogs()
    assert all(c.version and c.name for c in cats)
    assert {s.id for s in all_signatures(cats)} == set(ISSUE_ENTRIES)


@pytest.mark.parametrize("sig", all_signatures(load_catalogs()), ids=lambda s: s.id)
def test_every_entry_names_its_source_and_what_is_confirmed(sig):
    assert sig.source and sig.confirmed and sig.title
    assert sig.catalog.endswith("2026.12.1")


def _doc(**sig):
    base = {
        "id": "x",
        "title": "t",
        "kinds": ["busy_loop"],
        "confidence": 0.5,
        "source": "s",
        "logs": [{"regex": "boom"}],
    }
    base.update(sig)
    return {"schema": 1, "name": "n", "version": "1", "signatures": [base]}


@pytest.mark.parametrize(
    "doc, expected",
    [
        (
            {"schema": 2, "name": "n", "version": "1", "signatures": []},
            "schema: expected 1 (the catalog format this guardian reads), got 2",
        ),
        (_doc(kinds=["busy"]), "signatures[0].kinds[0]: expected an incident kind: one of busy_loop, "),
        (_doc(confidence=2), "signatures[0].confidence: expected a number in (0, 1], got 2"),
        (_doc(logs=[{"regex": "("}]), 'signatures[0].logs[0].regex: expected a valid regular expression, got "("'),
        (_doc(hot_thread={"frames": [{"line": 3}]}), "signatures[0].hot_thread.frames[0].line: unknown key"),
        (_doc(hot_thread={"state": "busy"}), "signatures[0].hot_thread.state: expected one of any, active, idle, gil"),
        (
            _doc(metrics=[{"metric": "m", "op": ">", "value": "high"}], logs=[]),
            "signatures[0].metrics[0].value: expected a number",
        ),
        (_doc(logs=[]), "signatures[0]: needs at least one clause besides kinds"),
        (_doc(fixed_in="soon"), 'signatures[0].fixed_in: expected a version like "0.26.0"'),
        (_doc(id="Bad Id"), "signatures[0].id: expected lower-case letters"),
        (_doc(colour="red"), "signatures[0].colour: unknown key"),
    ],
)
def test_a_bad_catalog_names_the_key_path_and_what_is_wrong(doc, expected):
    with pytest.raises(CatalogError) as e:
        parse_catalog(doc, "extra.yaml")
    assert f"extra.yaml: {expected}" in str(e.value)


def test_every_problem_of_a_file_is_reported_at_once():
    doc = _doc(kinds=["nope"], confidence=0)
    with pytest.raises(CatalogError) as e:
        parse_catalog(doc, "x.yaml")
    assert "kinds" in str(e.value) and "confidence" in str(e.value)


def test_an_extra_catalog_from_config_is_loaded_after_the_shipped_ones(tmp_path):
    (tmp_path / "site.yaml").write_text(
        "schema: 1\nname: site\nversion: '3'\nsignatures:\n"
        "  - {id: site-oom, title: OOM, kinds: [engine_dead], confidence: 0.5, source: ops,\n"
        "     logs: [{regex: 'CUDA out of memory'}]}\n"
    )
    cats = load_catalogs([tmp_path])
    assert cats[-1].name == "site" and cats[-1].signatures[0].catalog == "site 3"


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "schema: 1\nname: dup\nversion: '1'\nsignatures:\n  - {id: vllm-scheduler-assertion, title: t, "
            "kinds: [engine_dead], confidence: 0.5, source: s, logs: [{regex: x}]}\n",
            "is already defined in",
        ),
        ("schema: 1\nname: [\n", "not valid YAML"),
        ("", "empty file"),
    ],
)
def test_an_extra_catalog_that_clashes_or_does_not_parse_is_refused(tmp_path, text, expected):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(CatalogError) as e:
        load_catalogs([f])
    assert expected in str(e.value) and "bad.yaml" in str(e.value)


def test_a_missing_extra_catalog_file_says_so(tmp_path):
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalogs([tmp_path / "nope.yaml"])


def test_one_kind_alone_stands_for_a_list_of_one():
    (sig,) = parse_catalog(_doc(kinds="busy_loop"), "extra.yaml").signatures
    assert sig.kinds == ("busy_loop",)


@pytest.mark.parametrize(
    "doc, expected",
    [
        (_doc(logs=["boom"]), 'signatures[0].logs[0]: expected a mapping, got "boom"'),
        (
            _doc(hot_thread={"frames": [{"within": 0, "function": "f"}]}),
            "hot_thread.frames[0].within: expected an integer >= 1",
        ),
        (_doc(title=["a"]), 'signatures[0].title: expected a non-empty string, got ["a"]'),
        ({"schema": 1, "name": "n", "version": "1"}, "signatures: required"),
    ],
    ids=["a list item that is not a mapping", "a frame depth below 1", "a list for a string", "no signatures"],
)
def test_the_config_parser_judges_the_catalogs_types_the_same_way(doc, expected):
    with pytest.raises(CatalogError) as e:
        parse_catalog(doc, "extra.yaml")
    assert expected in str(e.value)

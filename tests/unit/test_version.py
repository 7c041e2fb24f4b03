"""vLLM versions order as PEP 440 (and pip) order them: post-releases after, pre-releases before."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.version import is_version, parse_version, version_lt


@pytest.mark.parametrize(
    "older, newer",
    [
        ("0.6.3", "0.6.3.post1"),  # the catalog once said False here
        ("0.6.3rc1", "0.6.3"),
        ("0.6.3.dev1", "0.6.3rc1"),
        ("0.11.1rc2.dev5+gabc", "0.11.1"),
        ("0.6.3", "0.6.4"),
        ("0.9.2", "0.10.0"),
        ("0.6.3", "0.6.3+cu124"),  # a local build of a release sorts after the plain release
    ],
)
def test_versions_order_as_pep_440_says(older, newer):
    assert version_lt(older, newer) and not version_lt(newer, older)


@pytest.mark.parametrize("same", [("0.6", "0.6.0"), ("v0.6.3", "0.6.3"), (" 0.6.3 ", "0.6.3")])
def test_spellings_of_one_version_are_equal(same):
    assert parse_version(same[0]) == parse_version(same[1])


@pytest.mark.parametrize("text", ["", "latest", "main-abc123", "0.6.3 beta"])
def test_what_is_not_a_version_is_a_value_error(text):
    assert not is_version(text)
    with pytest.raises(ValueError, match="not a version"):
        parse_version(text)

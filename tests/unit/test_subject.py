"""A subject names what a sample measures inside a target; its key is the form on the wire."""

import pytest

from vllm_guardian.model import Subject


@pytest.mark.parametrize(
    "subject, key",
    [
        (Subject(), ""),
        (Subject(4242), "p4242"),
        (Subject(4242, 4250), "p4242/t4250"),
    ],
)
def test_a_subject_and_its_key_read_each_other_back(subject, key):
    assert subject.key == key == str(subject)
    assert Subject.parse(key) == subject


@pytest.mark.parametrize("key", ["p", "t12", "p12/t", "p12/t3/x", "12", "p-1", " p1"])
def test_a_string_that_is_not_a_subject_parses_to_none(key):
    assert Subject.parse(key) is None


def test_the_threads_of_a_process_share_its_prefix():
    assert Subject(7, 9).key.startswith(Subject(7).threads_prefix)
    assert not Subject(70, 9).key.startswith(Subject(7).threads_prefix)

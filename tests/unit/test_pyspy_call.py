"""A py-spy call is listed in the manifest's ``steps`` with its outcome; one that never started has none."""

from __future__ import annotations

import pytest

from vllm_guardian.bundle.writer import PySpyCall

ARGV = ("py-spy", "dump", "--pid", "7", "--json")


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            PySpyCall("dump", 7, "blocking", ARGV, None, True, 0, 0.12345, False),
            {
                "what": "dump",
                "pid": 7,
                "mode": "blocking",
                "argv": list(ARGV),
                "rc": 0,
                "duration_s": 0.123,
                "timed_out": False,
                "error": None,
            },
        ),
        (
            PySpyCall("record", 7, "nonblocking", ARGV, "timed out", True, None, 9.0, True),
            {
                "what": "record",
                "pid": 7,
                "mode": "nonblocking",
                "argv": list(ARGV),
                "rc": None,
                "duration_s": 9.0,
                "timed_out": True,
                "error": "timed out",
            },
        ),
        (
            PySpyCall("dump", 7, "blocking", ARGV, "py-spy not found", ran=False),
            {"what": "dump", "pid": 7, "mode": "blocking", "argv": list(ARGV), "error": "py-spy not found"},
        ),
    ],
)
def test_a_call_is_one_manifest_step(call, expected):
    assert call.to_dict() == expected

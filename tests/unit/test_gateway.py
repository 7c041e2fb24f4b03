"""The gateway module: L1/L3 on a live completion, and the report it publishes."""

from __future__ import annotations

import json
import math

from vllm_guardian.gates.gateway import Reporter, check_completion, check_logprobs, check_text
from vllm_guardian.gates.reports import parse_report
from vllm_guardian.gates.trust import Keys, check


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail = fail

    def publish(self, channel: str, data: str) -> int:
        if self.fail:
            raise ConnectionError("redis down")
        self.sent.append((channel, data))
        return 1


def test_check_text_and_logprobs():
    assert check_text("A fine answer.") == ()
    assert [p.code for p in check_text("!!!!!!!!!!!!")] == ["run"]
    assert [p.code for p in check_logprobs([math.nan], [[math.nan]])] == ["non_finite"]


def test_check_completion_reads_a_vllm_choice():
    choice = {
        "text": "\x00\x00",
        "finish_reason": "length",
        "logprobs": {"token_logprobs": [float("nan")], "top_logprobs": [{"a": float("nan")}]},
    }
    assert sorted((p.level, p.code) for p in check_completion(choice)) == [("L1", "control"), ("L3", "non_finite")]


def test_the_reporter_publishes_one_message_per_request_at_its_most_decisive_level():
    rec = Recorder()
    problems = check_text("\x00!!!!!!!!!!!!") + check_logprobs([math.nan], [[math.nan]])
    assert Reporter(client=rec).report("node-a/vllm-8000", "req-9", problems, output="\x00!!!") is None
    assert [c for c, _ in rec.sent] == ["vllm_health_alert"]
    (report,) = [parse_report(d) for _, d in rec.sent]
    assert (report.level, report.target, report.request_id) == ("L3", "vllm-8000", "req-9")
    listed = [v for k, v in report.details.items() if k.startswith("problems.")]
    assert any(str(v).startswith("L1 control") for v in listed) and any(str(v).startswith("L3") for v in listed)


def test_a_reporter_with_keys_signs_what_the_guardian_verifies():
    keys = Keys({"gw1": b"s" * 32}, "gw1")
    rec = Recorder()
    Reporter(client=rec, keys=keys).report("node-a/t", "req-1", check_text("\x00\x00"))
    msg = json.loads(rec.sent[0][1])
    assert msg["kid"] == "gw1" and check(msg, keys) is None
    assert check(dict(msg, check_level="L3"), keys) == ("bad_signature", "signature does not match under kid 'gw1'")


def test_a_redis_error_is_returned_never_raised():
    err = Reporter(client=Recorder(fail=True)).report("t", "r", check_text("\x00"))
    assert err is not None and "redis down" in err

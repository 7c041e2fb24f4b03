"""A restart drains through vLLM's own /checkpoint/prepare?mode=wait where the server offers it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.remediation_world import API, World
from vllm_guardian.config.schema import DrainConfig
from vllm_guardian.model import Kind
from vllm_guardian.state.vllm_states import VllmAnswers
from vllm_guardian.testing.fake_http import FakeHttp, ok


def world(tmp_path, version: str, checkpoint: str | None, drain_checkpoint: str = "auto"):
    w = World(tmp_path)
    w.tracker.vllm_state(VllmAnswers("llm", API, version=version, version_read=True, checkpoint=checkpoint), 0)
    http = FakeHttp({("POST", "/checkpoint/prepare"): ok('{"state": "prepared"}')})
    spec = w.rem.settings.targets["llm"]
    targets = {"llm": replace(spec, drain=DrainConfig(timeout=30, checkpoint=drain_checkpoint))}
    w.rem = w.new_remediator(http=http, targets=targets)
    return w, http


def drained(w: World, kind: Kind) -> list:
    inc = w.open(kind)
    w.consider(inc)
    w.step()
    return [a for a in w.incident(inc.id).actions if a.name == "checkpoint_drain"]


def test_a_034_server_with_sleep_mode_is_asked_to_drain_itself_before_its_restart(tmp_path):
    w, http = world(tmp_path, "0.34.0", "running")
    actions = drained(w, Kind.HOST_MEMORY_LEAK)
    assert [(m, p) for m, p, _, _ in http.requests] == [("POST", "/checkpoint/prepare")]
    assert len(actions) == 1 and "/checkpoint/prepare?mode=wait" in actions[0].detail


@pytest.mark.parametrize(
    "version, checkpoint, drain_checkpoint, kind",
    [
        ("0.33.0", "running", "auto", Kind.HOST_MEMORY_LEAK),  # no checkpoint endpoints before 0.34
        ("0.34.0", None, "auto", Kind.HOST_MEMORY_LEAK),  # no --enable-sleep-mode: its status never answered
        ("0.34.0", "running", "off", Kind.HOST_MEMORY_LEAK),  # drain.checkpoint: off
        ("0.34.0", "running", "auto", Kind.BUSY_LOOP),  # a hung engine that does not step drains nothing
    ],
    ids=["0.33", "no-sleep-mode", "off", "hang"],
)
def test_no_checkpoint_drain_where_the_server_does_not_offer_it_or_it_cannot_help(
    tmp_path, version, checkpoint, drain_checkpoint, kind
):
    w, http = world(tmp_path, version, checkpoint, drain_checkpoint)
    assert drained(w, kind) == [] and http.requests == []

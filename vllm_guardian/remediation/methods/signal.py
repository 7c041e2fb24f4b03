"""``restart.mode: signal``: SIGTERM the tree and let an external supervisor start it again."""

from __future__ import annotations

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.remediation.methods.base import MethodContext, SignalStop, StartStep
from vllm_guardian.remediation.sequence import RestartSequence


class SignalMethod(SignalStop):
    name = "signal"

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        return StartStep("verify", "waiting for the external supervisor")

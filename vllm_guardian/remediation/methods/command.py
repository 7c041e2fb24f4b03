"""``restart.mode: command``: the guardian stops the tree and launches ``restart.command`` itself.

The launch is built by ``vllm_guardian.host.launch`` (a clean environment, as
``restart.user``/``group``) and checked before anything is stopped (``start_problem``). A target
recorded as running with a known bug's workaround (``policy/workaround.py``) is started with its
flags and environment until ``guardian workaround clear`` drops the record. A failed
start is retried ``START_ATTEMPTS`` times (2 s, 4 s apart), then left to a human. The owner gets
``owner_grace`` only when the server died or was found already gone (otherwise the guardian
stopped it itself, and nobody else is bringing it back).
"""

from __future__ import annotations

from vllm_guardian.redact import redact_argv
from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.model import Kind
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.host.launch import build_launch_spec
from vllm_guardian.policy.workaround import WorkaroundState
from vllm_guardian.remediation.methods.base import WAIT, MethodContext, SignalStop, StartStep
from vllm_guardian.remediation.sequence import RestartSequence

START_ATTEMPTS = 3  # a start is tried this many times (2 s, 4 s apart), then left to a human


class CommandMethod(SignalStop):
    name = "command"

    def refusal(self, rc: RestartConfig, ctx: MethodContext) -> Refusal | None:
        if not rc.command:
            return Refusal("restart.mode command without a command", "no_command")
        return None

    def start_problem(self, rc: RestartConfig, ctx: MethodContext) -> str | None:
        """An unwritable ``log_file`` (a read-only /var/log under ProtectSystem=strict), a missing
        ``cwd``, a program that is not there, an unknown ``user``/``group``."""
        try:
            problems = ctx.control.preflight(build_launch_spec(rc))
        except (ValueError, KeyError, OSError) as e:  # an unknown user or group
            problems = [f"restart: cannot build the launch: {e}"]
        if not problems:
            return None
        return "; ".join(problems) + "; not stopping a server that could not be started again"

    def owner_may_restart(self, seq: RestartSequence) -> bool:
        return seq.found_gone or seq.reason == Kind.ENGINE_DEAD.value

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        progress = seq.progress
        if progress.start_retry_at is not None and now < progress.start_retry_at:
            return WAIT
        progress.start_issued = True  # from here a guardian restarted mid-start never starts again
        ctx.save(seq)
        try:
            spec = build_launch_spec(WorkaroundState(ctx.settings.state_dir).restart_for(seq.target, rc))
            seq.started_pid = ctx.control.start_spec(spec)
        except (OSError, ValueError) as e:
            progress.start_failures += 1
            tries = progress.start_failures
            if tries >= START_ATTEMPTS:
                return StartStep("fail", f"start failed {tries} times, last: {e}; a human must start it")
            wait = 2.0**tries
            progress.start_retry_at = now + wait
            ctx.record(
                seq, "start", "failed", f"start failed: {e}; retrying in {wait:g}s ({tries} of {START_ATTEMPTS})"
            )
            ctx.save(seq)
            return WAIT
        return StartStep("verify", f"started pid {seq.started_pid}: {' '.join(redact_argv(spec.argv))[:200]}")

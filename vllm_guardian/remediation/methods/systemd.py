"""``restart.mode: systemd``: the guardian stops the tree, then ``systemctl restart <unit>``.

The unit is ``restart.unit``, else the unit the target was matched by. systemd is the owner: before
the guardian starts anything it waits ``owner_grace`` for systemd (a ``Restart=`` policy) to bring
the unit back itself, seen as ActiveState activating/reloading, or active with a MainPID outside
the stopped tree. A target recorded as running with a known bug's workaround gets the unit drop-in
``<systemd_dropin_root>/<unit>.d/50-vllm-guardian-workaround.conf`` written (and ``systemctl
daemon-reload``) before the restart; once the record is cleared the next restart removes it.
"""

from __future__ import annotations

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.host.runner import CommandResult
from vllm_guardian.policy.workaround import WorkaroundState, dropin_path, sync_dropin
from vllm_guardian.remediation.methods.base import WAIT, MethodContext, SignalStop, StartStep
from vllm_guardian.remediation.sequence import RestartSequence


class SystemdMethod(SignalStop):
    name = "systemd"

    def __init__(self, unit_for: dict[str, str | None] | None = None) -> None:
        self.unit_for = unit_for if unit_for is not None else {}  # target -> the matched unit

    def unit(self, seq: RestartSequence, rc: RestartConfig) -> str | None:
        return rc.unit or self.unit_for.get(seq.target)

    def owner_may_restart(self, seq: RestartSequence) -> bool:
        return True

    def owner_restarting(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> str | None:
        unit = self.unit(seq, rc)
        if not unit:
            return None
        argv = ("systemctl", "show", "-p", "ActiveState", "-p", "MainPID", unit)
        res = ctx.job(seq, "unit_state", lambda: ctx.cmd_runner.run(argv, 10), now, retry_every=2.0)
        shown = None if res is None else res.value
        if not isinstance(shown, CommandResult) or not shown.ok:
            return None
        props = dict(line.split("=", 1) for line in shown.text.splitlines() if "=" in line)
        state, main = props.get("ActiveState", ""), props.get("MainPID", "0")
        old = {k.pid for k in seq.tree}
        if state in ("activating", "reloading") or (
            state == "active" and main.isdigit() and int(main) not in old and int(main) != 0
        ):
            return f"systemd unit {unit} is {state} (MainPID {main})"
        return None

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        unit = self.unit(seq, rc)
        if not seq.progress.start_issued:
            seq.progress.start_issued = True
            ctx.save(seq)
        applied = WorkaroundState(ctx.settings.state_dir).load().get(seq.target)
        root, runner = ctx.settings.systemd_dropin_root, ctx.cmd_runner

        def restart() -> CommandResult:
            if sync_dropin(root, str(unit), applied.workaround if applied else None):
                reload = runner.run(("systemctl", "daemon-reload"), 30)
                if not reload.ok:
                    return reload
            return runner.run(("systemctl", "restart", str(unit)), 60)

        res = ctx.job(seq, "systemctl", restart, now)
        if res is None:
            return WAIT
        if isinstance(res.value, CommandResult) and res.value.ok:
            with_dropin = f" with the workaround drop-in {dropin_path(root, str(unit))}" if applied else ""
            return StartStep("verify", f"systemctl restart {unit}{with_dropin}")
        why = res.error if res.error is not None else (res.value.error_text if res.value is not None else "no result")
        return StartStep("fail", f"systemctl restart {unit} failed: {why!s}"[:300])

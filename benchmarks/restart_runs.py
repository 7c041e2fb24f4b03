"""A real vLLM restarted by the guardian (``restart.mode: command``, not dry-run), for the
benchmark: per hang kind, a fresh server, the fault tripped, and the incident's own actions give
each phase (``benchmarks.recovery.phases``). The replacement the guardian starts is swept away
after (it lives in its own session)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .recovery import evidence_seconds, phases
from .report_restart import RestartRun

STOPPING = ("stopping", "releasing", "starting", "verifying")


def _sweep(port: int, module: str) -> None:
    import psutil

    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if str(port) in cmd and module in cmd:
            try:
                os.killpg(os.getsid(p.pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def restart_run(h, model: Path, work: Path, fault: str, kind: str, timeout: float = 900.0) -> RestartRun:
    from vllm_guardian.netaddr import free_port

    port = free_port("127.0.0.1")
    faults = work / "faults"
    old = h.VllmServer(model, faults, work / "vllm.log", port=port).start()
    switch = h.FaultSwitch(faults)
    g = None
    try:
        own = old.wait_ready(timeout)
        target = {
            "name": "vllm",
            "match": {"port": port},
            "restart": h.command_restart(old, work / "vllm-restarted.log"),
        }
        g = h.GuardianRun(work / "guardian", port, dry_run=False, extra={"targets": [target]}).start()
        if not g.wait_ready(180):
            raise RuntimeError(f"guardian never saw the server ready:\n{g.log_text()}")
        onset = h.fire(old, switch, fault)
        inc = g.wait_incident(kind, 180)
        if inc is None:
            return RestartRun(fault, kind, own, outcome="not detected")
        # the trigger must go before the replacement's first request, and not before the stop
        # (clearing a busy loop or stall ends it, and a recovered engine needs no restart)
        h.poll(lambda: ((g.target() or {}).get("remediation") or {}).get("phase") in STOPPING, 180, every=0.25)
        switch.clear(fault)
        done = h.poll(
            lambda: next((i for i in g.incidents() if i["id"] == inc["id"] and i["status"] == "resolved"), None),
            timeout,
            every=1.0,
        )
        if done is None:
            return RestartRun(fault, kind, own, outcome=f"not resolved in {timeout:.0f} s")
        last = done["actions"][-1] if done["actions"] else {"name": "resolved", "status": ""}
        outcome = f"{last['name']} {last['status']}".strip()  # e.g. "verifying ok"
        return RestartRun(fault, kind, own, phases(done, onset, evidence_seconds(done)), outcome)
    finally:
        if g is not None:
            g.stop()
        switch.clear(fault)
        old.stop()
        _sweep(port, h.API_SERVER_MODULE)
        time.sleep(1.0)

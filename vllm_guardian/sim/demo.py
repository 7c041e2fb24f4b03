"""``guardian demo``: the whole path on one machine, live in the terminal.

Starts the shipped simulated vLLM server (API server + ``VLLM::EngineCore``), the
guardian with the same wiring as ``guardian run`` (embedded Redis, evidence,
remediation in ``command`` mode) in a temp dir, injects the seed's failure — a
pure-Python busy loop in the engine — and shows detection → evidence → alert →
drain → restart → resolved, with vLLM's own ``/health`` (200 throughout the
hang) beside it. Cleans up every process it started; exit 0 on success.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.runtime import Runtime
from vllm_guardian.surface.status_render import render_status
from vllm_guardian.surface.status_snapshot import TargetStatus
from vllm_guardian.sim.control import API_SERVER_MODULE as SIM_MODULE, SimServer


class _Out:
    def __init__(self, stream=sys.stdout) -> None:
        self.t0 = time.monotonic()
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            print(f"[t+{time.monotonic() - self.t0:5.1f}s] {msg}", file=self.stream, flush=True)


def run_demo(keep: bool = False, timeout: float = 120.0) -> int:
    out = _Out()
    tmp = Path(tempfile.mkdtemp(prefix="guardian-demo-"))
    logging.basicConfig(level=logging.WARNING, format="           guardian log: %(levelname)s %(message)s")
    server = SimServer(startup_delay=3.0, log_path=str(tmp / "sim-vllm.log"))
    stop = threading.Event()
    rt: Runtime | None = None
    loop = listener = None
    try:
        out("starting a simulated vLLM server: an API server + a VLLM::EngineCore child")
        server.start()
        out(f"  API server pid {server.pid}, {server.url} (it loads its 'model' for 3 s first)")
        cfg = parse_config(
            {
                "node": "demo-node",
                "state_dir": str(tmp / "state"),
                "autodiscover": False,
                "targets": [
                    {
                        "name": "demo-llm",
                        "match": {"port": server.port},
                        "restart": {
                            "mode": "command",
                            "stop_timeout": 5,
                            "ready_timeout": 60,
                            "log_file": str(tmp / "sim-vllm-restarted.log"),
                            "command": [
                                sys.executable,
                                "-m",
                                SIM_MODULE,
                                "--port",
                                str(server.port),
                                "--startup-delay",
                                "2",
                            ],
                        },
                        "drain": {"timeout": 10},
                    }
                ],
                "evidence": {"record_seconds": 2},
                "api": {"http": None},
            }
        )
        rt = Runtime.start(cfg)
        out(
            f"guardian started: 1 tick/s, embedded Redis on {rt.sink.stats().get('url') or 'a unix socket'}, "
            f"state in {cfg.state_dir}"
        )
        listener = threading.Thread(target=_print_alerts, args=(rt, out, stop), daemon=True)
        listener.start()
        loop = threading.Thread(target=rt.run, args=(stop,), daemon=True)
        loop.start()

        deadline = time.monotonic() + timeout
        target = _wait(lambda: _target(rt, lambda t: t.ready and t.canary is not None), deadline)
        if not target:
            out("FAILED: the target never became ready")
            return 1
        old_pid = target.pid
        out(
            f"target demo-llm ready: its first canary completion answered in "
            f"{1000 * (target.canary.latency_s or 0):.0f} ms (startup grace over)"
        )

        out(
            "injecting a busy loop into the EngineCore (a pure-Python spin, like vLLM's ghost-key LRU bug) "
            "and sending one request that trips it"
        )
        server.set_fault("busy_loop")
        onset = time.monotonic()
        threading.Thread(target=_hang_one, args=(server,), daemon=True).start()

        shown: set[str] = set()
        last_print = 0.0
        while time.monotonic() < deadline:
            time.sleep(0.25)
            t = _target(rt, lambda t: True)
            if t is None:
                continue
            for line in _progress(rt, t, shown, onset):
                out(line)
            if "resolved" in shown:
                break
            if (
                t.phase in ("warming", "serving", "incident")
                and time.monotonic() - last_print >= 2.0
                and "incident" not in shown
            ):
                last_print = time.monotonic()
                out(_one_line(t, server))
        else:
            out("FAILED: the incident did not resolve before the deadline")
            return 1
        time.sleep(1.2)
        new = _target(rt, lambda t: True)
        print()
        print(render_status(rt.daemon.status()))
        print()
        inc = next(iter(rt.daemon.incidents.recent(1)), None)
        out(
            f"the server now runs as pid {new.pid if new else '?'} (was {old_pid}) and answers again: "
            f"/health {server.health()}"
        )
        if inc is not None:
            out(
                f"incident {inc.id}: {cfg.state_dir}/incidents/{inc.id}/ (incident.json, summary.txt, "
                f"py-spy dumps, flame graph)" + ("" if keep else " — run with --keep to look at it")
            )
        out("alerts: the Redis stream guardian:alerts (durable, consumer groups) and channel guardian:alerts")
        return 0
    finally:
        stop.set()
        if rt is not None:
            rt.clock.wake()
        if loop is not None:
            loop.join(10)
        if rt is not None:
            rt.close()
        server.stop()
        _sweep(server.port)
        left = server.leftovers()
        out(
            "cleaned up: every process the demo started is gone"
            if not left
            else f"WARNING: processes left behind: {left}"
        )
        if keep:
            out(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


REMEDIATION_PHASES = ("lease", "draining", "stopping", "releasing", "starting", "verifying")


def _progress(rt: Runtime, t: TargetStatus, shown: set[str], onset: float):
    """Lines for each stage the first time it is seen."""
    now = time.monotonic()
    incs = rt.daemon.incidents.recent(5)
    inc = next((i for i in incs if i.kind.value == "busy_loop"), None)
    if inc is not None and "incident" not in shown:
        shown.add("incident")
        yield f"DETECTED busy_loop {now - onset:.1f}s after the fault's onset: {inc.summary}"
        for key in ("pid", "tid", "cpu_ratio", "voluntary_per_cpu_s", "syscall_running_fraction", "reason"):
            if key in inc.signals:
                yield f"    {key}: {inc.signals[key]}"
    if inc is not None and inc.evidence_dir and "evidence" not in shown:
        shown.add("evidence")
        yield f"EVIDENCE captured before any action: {inc.evidence_dir}"
        summary = Path(inc.evidence_dir) / "summary.txt"
        if summary.exists():
            for line in summary.read_text().splitlines()[:12]:
                yield f"    | {line}"
    # each remediation phase as the incident records it when the phase ends: several may pass
    # within one tick (nothing to drain in a hang), faster than a status poll would see them
    for action in inc.actions if inc is not None else ():
        if action.name in REMEDIATION_PHASES and action.name not in shown:
            shown.add(action.name)
            yield f"REMEDIATION {action.name}: {action.detail}"
    if inc is not None and inc.status.value == "resolved" and "resolved" not in shown:
        shown.add("resolved")
        yield f"RESOLVED {now - onset:.1f}s after the onset: {inc.actions[-1].detail}"


def _print_alerts(rt: Runtime, out: _Out, stop: threading.Event) -> None:
    """Follow the alert channel like a live subscriber would."""
    try:
        pubsub = rt.sink.client.pubsub()
        pubsub.subscribe(rt.daemon.cfg.alerts.channel)
        while not stop.is_set():
            msg = pubsub.get_message(timeout=0.5)
            if msg and msg.get("type") == "message":
                ev = json.loads(msg["data"])
                out(
                    f"ALERT {ev['status']} {ev['kind']} ({ev['reason']}) on {ev['target']['name']}: "
                    f"{ev['summary'][:90]}"
                )
        pubsub.close()
    except Exception as e:  # noqa: BLE001 - the demo goes on without the live view
        if not stop.is_set():
            out(f"(alert listener stopped: {e})")


def _wait(pred, deadline: float):
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.25)
    return None


def _target(rt: Runtime, pred: Callable[[TargetStatus], bool]) -> TargetStatus | None:
    return next((t for t in rt.daemon.status().targets if pred(t)), None)


def _hang_one(server: SimServer) -> None:
    try:
        server.complete("hello", max_tokens=4, timeout=120)
    except Exception:  # noqa: BLE001 - whatever ends the request, the engine spins on
        pass  # the engine is spinning: this request never completes


def _one_line(t: TargetStatus, server: SimServer) -> str:
    engine = next((p for p in t.processes if p.role == "engine_core"), None)
    hot = engine.hottest_thread if engine is not None else None
    seen = (
        "engine thread: no per-thread reading yet"
        if not hot
        else (
            f"engine thread {hot.tid}: CPU {100 * (hot.cpu_ratio or 0):.0f}%, "
            f"voluntary switches/s {hot.voluntary_per_s}, syscall {hot.syscall}"
        )
    )
    suspect = next(iter(t.suspects.values()), None)
    return f"vLLM /health={server.health()}  steps/s={t.engine.steps_per_s}  {seen}" + (
        f"\n           suspect: {suspect}" if suspect else ""
    )


def _sweep(port: int) -> None:
    """The guardian started the replacement server itself: stop it and its session."""
    import os
    import signal

    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if SIM_MODULE in cmd and str(port) in cmd:
            try:
                os.killpg(os.getsid(p.pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

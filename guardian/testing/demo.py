"""``guardian demo``: the whole detection path on one machine, in the terminal.

Starts the shipped simulated vLLM server (API server + ``VLLM::EngineCore``),
runs the guardian in-process against it with real /proc and real HTTP, injects
the seed's failure — a pure-Python busy loop in the engine — and shows what
vLLM's ``/health`` says (200) next to what the guardian sees, until the
incident opens. Cleans up every process it started; exit 0 on success.
"""
from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..clock import SystemClock
from ..config import parse_config
from ..daemon import Daemon
from ..host.http import StdlibHttpClient
from ..host.procfs import ProcFS
from ..incidents import IncidentStore
from ..model import Transition
from ..status_view import render_status
from .sim_control import SimServer


class _Out:
    def __init__(self, stream=sys.stdout) -> None:
        self.t0 = time.monotonic()
        self.stream = stream

    def __call__(self, msg: str) -> None:
        print(f"[t+{time.monotonic() - self.t0:5.1f}s] {msg}", file=self.stream, flush=True)


def run_demo(keep: bool = False, timeout: float = 120.0) -> int:
    out = _Out()
    tmp = Path(tempfile.mkdtemp(prefix="guardian-demo-"))
    logging.basicConfig(level=logging.WARNING, format="    guardian log: %(levelname)s %(message)s")
    server = SimServer(startup_delay=3.0, log_path=str(tmp / "sim-vllm.log"))
    stop = threading.Event()
    clock = SystemClock()
    opened: list[Transition] = []
    loop: threading.Thread | None = None
    try:
        out("starting a simulated vLLM server: an API server + a VLLM::EngineCore child")
        server.start()
        out(f"  API server pid {server.pid}, {server.url} (it loads its 'model' for 3 s first)")
        cfg = parse_config({
            "node": "demo-node",
            "state_dir": str(tmp / "state"),
            "autodiscover": False,
            "targets": [{"name": "demo-llm", "match": {"port": server.port}}],
            "api": {"http": None},
        })
        daemon = Daemon(cfg, clock, ProcFS(), StdlibHttpClient(), store=IncidentStore(cfg.state_dir),
                        sinks=[opened.append])
        loop = threading.Thread(target=daemon.run, args=(stop,), name="guardian-loop", daemon=True)
        loop.start()
        out(f"guardian started: 1 tick/s, state in {cfg.state_dir}")

        deadline = time.monotonic() + timeout
        target = _wait(lambda: _target(daemon, "ready"), deadline)
        if not target:
            out("FAILED: the target never became ready")
            return 1
        out(f"target demo-llm ready: its first canary completion answered in "
            f"{1000 * target['canary']['latency_s']:.0f} ms (startup grace over)")

        out("injecting a busy loop into the EngineCore (a pure-Python spin, like vLLM's "
            "ghost-key LRU bug) and sending one request that trips it")
        server.set_fault("busy_loop")
        onset = time.monotonic()
        threading.Thread(target=_hang_one, args=(server,), daemon=True).start()

        last_print = 0.0
        while not opened and time.monotonic() < deadline:
            time.sleep(0.25)
            if time.monotonic() - last_print >= 2.0:
                last_print = time.monotonic()
                out(_one_line(daemon, server))
        if not opened:
            out("FAILED: no incident within the deadline")
            return 1
        inc = opened[0].incident
        out(f"INCIDENT {inc.kind.value} opened {time.monotonic() - onset:.1f}s after the fault's onset")
        out(f"  {inc.summary}")
        for key in ("pid", "tid", "role", "cpu_ratio", "voluntary_per_cpu_s", "syscall_running_fraction",
                    "reason", "canary_latency_s"):
            if key in inc.signals:
                out(f"    {key}: {inc.signals[key]}")
        code = server.health()
        out(f"meanwhile vLLM's own GET /health answers {code}: a liveness probe sees nothing wrong")
        time.sleep(1.2)  # one more tick so the status shows the incident
        print()
        print(render_status(daemon.status()))
        print()
        out(f"incident stored in {cfg.state_dir}/incidents/{inc.id}/incident.json "
            f"(run with --keep to read it afterwards)")
        out("not active in this version: evidence capture (py-spy), Redis alerts, drain and restart "
            "(`guardian check-config` lists what is not active yet)")
        return 0
    finally:
        stop.set()
        clock.wake()
        if loop is not None:
            loop.join(5)
        server.stop()
        left = server.leftovers()
        out("cleaned up: every process the demo started is gone" if not left
            else f"WARNING: processes left behind: {left}")
        if keep:
            out(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _wait(pred, deadline: float):
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.25)
    return None


def _target(daemon: Daemon, want: str):
    st = daemon.status()
    for t in st.get("targets", []):
        if want == "ready" and t["ready"] and t["canary"]:
            return t
    return None


def _hang_one(server: SimServer) -> None:
    try:
        server.complete("hello", max_tokens=4, timeout=120)
    except Exception:
        pass  # the engine is spinning: this request never completes


def _one_line(daemon: Daemon, server: SimServer) -> str:
    st = daemon.status()
    t = next(iter(st.get("targets", [])), None)
    if t is None:
        return "waiting for the guardian's first status"
    engine = next((p for p in t["processes"] if p["role"] == "engine_core"), None)
    hot = engine and engine["hottest_thread"]
    seen = "engine thread: no per-thread reading yet" if not hot else (
        f"engine thread {hot['tid']}: CPU {100 * (hot['cpu_ratio'] or 0):.0f}%, "
        f"voluntary switches/s {hot['voluntary_per_s']}, syscall {hot['syscall']}")
    health = server.health()
    suspect = next(iter(t["suspects"].values()), None)
    return f"/health={health}  steps/s={t['engine']['steps_per_s']}  {seen}" + (
        f"\n           suspect: {suspect}" if suspect else "")

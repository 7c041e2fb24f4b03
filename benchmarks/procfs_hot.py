"""``python -m benchmarks.procfs_hot``: the procfs probe's cost on a busy engine-shaped process.

A process of ~75 threads (like a vLLM EngineCore: pools idle on a futex) with one thread
spinning, read by ``ProcfsReader`` every 0.25 s with ``hot_cpu_ratio`` low enough that the
process counts as hot on a loaded machine (so the per-thread stage runs every time). Reports the
reader's own CPU per collect (``time.thread_time`` of the calling thread, so the spinner's CPU
is not counted) and the samples it produced. Light: one process, a few seconds.
"""

from __future__ import annotations

import os
import threading
import time

from vllm_guardian.config.schema import ProcfsProbeConfig
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcessInfo, Role, Target
from vllm_guardian.probes.procfs import ProcfsReader


def main(threads: int = 75, collects: int = 20) -> None:
    stop = threading.Event()
    for _ in range(threads - 2):
        threading.Thread(target=stop.wait, daemon=True).start()

    def spin() -> None:
        while not stop.is_set():
            pass

    threading.Thread(target=spin, daemon=True).start()
    fs = ProcFS()
    key = fs.identity(os.getpid())
    target = Target("t", key, (ProcessInfo(key, os.getppid(), Role.ENGINE_CORE, ("VLLM::EngineCore",)),), port=1)
    reader = ProcfsReader(fs, ProcfsProbeConfig(hot_cpu_ratio=0.1))
    reader.collect([target], set(), time.monotonic())
    time.sleep(0.25)
    cpu, samples, read = 0.0, 0, 0
    for _ in range(collects):
        t0 = time.thread_time()
        res = reader.collect([target], set(), time.monotonic())
        cpu += time.thread_time() - t0
        samples += len(res.samples)
        read += len(res.processes[key].threads) if key in res.processes else 0
        time.sleep(0.25)
    stop.set()
    print(
        f"{threads} threads, 1 spinning: {1000 * cpu / collects:.2f} ms of CPU per collect, "
        f"{samples / collects:.0f} samples, {read / collects:.1f} threads read in full"
    )


if __name__ == "__main__":
    main()

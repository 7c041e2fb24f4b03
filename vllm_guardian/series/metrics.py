"""Names of the series that probes write and detectors read: the contract between them.

Subjects: ``""`` = the target as a whole, ``p<pid>`` = a process, ``p<pid>/t<tid>`` = a thread.
A value that could not be read is *absent* (no sample), never 0.
"""

# procfs, per process (subject p<pid>)
PROC_CPU = "proc.cpu_ratio"  # (utime+stime) delta / wall delta, 1.0 = one core
PROC_RSS = "proc.rss_bytes"
PROC_THREADS = "proc.threads"
PROC_MAIN_RUN_S = "proc.main_thread_run_s"  # the main thread's time on a CPU (schedstat, a counter, s):
# API-server processes only, every tick (an event loop that serves runs at least ~10 times a second)

# procfs, per thread (subject p<pid>/t<tid>); only for hot or suspected processes
THREAD_CPU = "thread.cpu_ratio"
THREAD_VOL_RATE = "thread.voluntary_per_s"  # voluntary context switches / s
THREAD_NONVOL_RATE = "thread.involuntary_per_s"  # involuntary context switches / s
THREAD_RUNNING = "thread.syscall_running"  # 1 when /proc/.../syscall says "running", else 0
THREAD_DEMAND = "thread.cpu_demand"  # (on-CPU + runqueue wait) / wall, from schedstat:
# a spinner starved by a busy node still reads ~1
THREAD_SYSCALLS = "thread.syscalls"  # syscr + syscw from task/<tid>/io (a counter): hot threads
PROC_SYSCALLS = "proc.syscalls"  # syscr + syscw from <pid>/io (a counter): hot processes of a --grpc server
# of API-server processes only (an event loop that makes none is not serving)

# vllm_http, per target (subject "")
HEALTH_OK = "http.health_ok"  # 1 = 200, 0 = anything else / refused
HEALTH_LATENCY = "http.health_latency_s"
METRICS_OK = "http.metrics_ok"  # 1 = parsed, 0 = scrape failed or unparsable
REQ_RUNNING = "vllm.num_requests_running"
REQ_WAITING = "vllm.num_requests_waiting"
KV_USAGE = "vllm.kv_cache_usage_perc"  # 0..1 (older vLLM: gpu_cache_usage_perc)
ITERATIONS = "vllm.iterations_total"  # vllm:iteration_tokens_total_count: one per engine step
GEN_TOKENS = "vllm.generation_tokens_total"
PROMPT_TOKENS = "vllm.prompt_tokens_total"
PREEMPTIONS = "vllm.num_preemptions_total"
SUCCESS = "vllm.request_success_total"  # summed over finished_reason

# Counters that advance only when the engine makes progress.
PROGRESS_COUNTERS = (ITERATIONS, GEN_TOKENS, PROMPT_TOKENS, SUCCESS)


def engine_subject(engine: str | int) -> str:
    """The subject of one engine's own counters and gauges (vLLM's ``engine`` label) on a
    data-parallel server; written only when the page shows more than one engine."""
    return f"engine:{engine}"


# canary, per target (subject ""); one sample per finished canary, stamped at its end.
CANARY_OK = "canary.ok"  # 1 = answered, 0 = timed out or failed
CANARY_TIMEOUT = "canary.timed_out"  # 1 = timed out (a hang), 0 = answered or failed fast
CANARY_LATENCY = "canary.latency_s"  # end - start, for answered and timed-out canaries
CANARY_STARTED = "canary.started_at"  # value = monotonic start time of the canary that just ended
CANARY_RANK = "canary.dp_rank"  # the data-parallel rank the canary was sent to (X-data-parallel-rank);
# absent for a canary the server routed itself

# accelerators (NVML / npu-smi), per target: subject "" = summed over the target's processes,
# p<pid> = one process (memory only); written only when a backend was read (npu-smi: every ~5 s).
ACCEL_MEM = "accel.memory_bytes"  # accelerator memory held by the process / target
ACCEL_UTIL = "accel.utilization"  # 0..1, max over the devices the target uses ("" only)
ACCEL_TOTAL = "accel.memory_total_bytes"  # total memory of the devices the target uses ("" only)

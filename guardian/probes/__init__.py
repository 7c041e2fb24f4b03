"""Probes: what the guardian sees. One probe per file; the file name is the registry
name, the config key under ``probes:`` and the ``probe`` metric label.

- ``procfs``: per process/thread CPU, switches, state, syscall (inline, cheap).
- ``vllm_http``: ``/health`` and ``/metrics`` (off the loop thread).
- ``canary``: a one-token completion (off the loop thread, one in flight per target).
- ``accel``: NVML / npu-smi memory, utilisation, per-process memory (off the loop thread).
"""
PROBES = ("procfs", "vllm_http", "canary", "accel")

"""Probes: what the guardian sees. One probe per file; ``table.py`` lists them in run order.

- ``procfs``: per process/thread CPU, switches, state, syscall (inline, cheap).
- ``vllm_http``: ``/health`` and ``/metrics`` (off the loop thread).
- ``canary``: a one-token completion (off the loop thread, one in flight per target).
- ``accel``: NVML / npu-smi memory, utilisation, per-process memory (off the loop thread).

``base.py`` says what a probe is to the loop (``Probe``, ``Job``, ``Folded``, ``Seen``).
"""

"""A busy loop on a ``--grpc`` server, judged without ``/metrics`` or a canary (vLLM's gRPC server has
neither an HTTP ``/metrics`` nor an HTTP completion to send).

Reads the target's hot threads (busy_loop's test: demand, few voluntary switches, ``running`` in
its syscall file, covering the window), the hot thread's own syscall count (``task/<tid>/io``),
its whole process's (``<pid>/io``: every thread, so an engine whose output thread still sends its
steps is moving) and the accelerator utilization of the target's devices. Decides: a covered hot
thread whose own and whose process's syscall counts both stood still since it turned hot (over the
last ``min_coverage`` of the window at most), while no accelerator of the target is busy
(``accel.utilization`` ≤ 5 %, or none), is a confirmed ``busy_loop``, reason ``syscalls_frozen``:
a serving engine hands its outputs on every step (a read or write somewhere in its process), a
pure-Python spin makes none. An unreadable io file (it needs the same uid, root or CAP_SYS_PTRACE)
proves nothing.
"""

from __future__ import annotations

from vllm_guardian.config.schema_detectors import BusyLoopConfig
from vllm_guardian.detectors.hot_threads import HotThread
from vllm_guardian.detectors.progress import counter_frozen, syscalls_frozen
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Subject
from vllm_guardian.series import metrics as m

ACCEL_BUSY = 0.05  # an accelerator this busy is working: no verdict from the syscalls alone


def frozen_spinner(view: TargetView, hot: list[HotThread], bl: BusyLoopConfig) -> tuple[HotThread, float] | None:
    """(the spinning thread, since when it is judged) on a --grpc target, or None."""
    st = view.state
    if not st.grpc:
        return None
    util = view.series.latest(st.target.name, "", m.ACCEL_UTIL)
    if util is not None and st.now - util[0] <= 10.0 and util[1] > ACCEL_BUSY:
        return None
    for h in hot:
        since = max(h.first_t, st.now - bl.min_coverage * bl.window)
        args = (view.series, st.target.name)
        if syscalls_frozen(*args, h.subject, since, st.now, st.probe_interval) and counter_frozen(
            *args, Subject(h.pid).key, m.PROC_SYSCALLS, since, st.now, st.probe_interval
        ):
            return h, since
    return None

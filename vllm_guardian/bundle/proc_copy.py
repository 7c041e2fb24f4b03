"""/proc into the bundle, through ``ProcFS``: is each snapshotted process still itself, and a copy
of its files.

``check_identity``: the same process as in the snapshot (pid AND starttime) and not a zombie,
else a failure that says why (a process whose stat cannot be read is still captured).
``copy_process``: the process's ``status`` and ``stat`` and, per thread, ``stat``, ``status``,
``syscall``, ``wchan``, ``stack`` → ``proc/<pid>/…``; each text is also kept by
``(pid, tid, file)`` (tid 0: the process) for the summary. A thread gone mid-read ends its files.
"""

from __future__ import annotations

from vllm_guardian.bundle.writer import BundleWriter
from vllm_guardian.errors import AccessDenied, GuardianError, TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcessInfo

PROCESS_FILES = ("status", "stat")
THREAD_FILES = ("stat", "status", "syscall", "wchan", "stack")

ProcTexts = dict[tuple[int, int, str], str]  # (pid, tid or 0, file name) -> text


def check_identity(procfs: ProcFS, p: ProcessInfo, bundle: BundleWriter) -> bool:
    """Same process as in the snapshot (pid AND starttime) and not a zombie; else a reason."""
    try:
        st = procfs.stat(p.pid)
    except TargetGone as e:
        bundle.fail(f"proc/{p.pid}", f"process gone before capture: {e}")
        return False
    except GuardianError as e:
        bundle.fail(f"proc/{p.pid}/stat", f"identity not verifiable: {e}")
        return True
    if st.starttime != p.key.starttime:
        bundle.fail(
            f"proc/{p.pid}",
            f"pid {p.pid} now belongs to another process (starttime {st.starttime} != {p.key.starttime}): not captured",
        )
        return False
    if st.state in ("Z", "X"):
        bundle.fail(f"proc/{p.pid}", "process exited (zombie): no stacks to take")
        return False
    return True


def copy_process(procfs: ProcFS, pid: int, bundle: BundleWriter, texts: ProcTexts) -> None:
    for name in PROCESS_FILES:
        _copy(procfs, f"{pid}/{name}", bundle, texts, (pid, 0, name))
    try:
        tids = procfs.tids(pid)
    except GuardianError as e:
        bundle.fail(f"proc/{pid}/task", proc_reason(e))
        return
    for tid in tids:
        for name in THREAD_FILES:
            if not _copy(procfs, f"{pid}/task/{tid}/{name}", bundle, texts, (pid, tid, name)) and name == "stat":
                break  # the thread is gone: its other files are too


def _copy(procfs: ProcFS, rel: str, bundle: BundleWriter, texts: ProcTexts, key: tuple[int, int, str]) -> bool:
    try:
        text = procfs.read_text(rel)
    except GuardianError as e:
        bundle.fail(f"proc/{rel}", proc_reason(e))
        return False
    texts[key] = text
    bundle.write(f"proc/{rel}", text)
    return True


def proc_reason(e: GuardianError) -> str:
    if isinstance(e, TargetGone):
        return f"gone: {e}"
    if isinstance(e, AccessDenied):
        return f"not permitted (needs root or CAP_SYS_PTRACE): {e}"
    return str(e)

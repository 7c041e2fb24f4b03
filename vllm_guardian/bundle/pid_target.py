"""A target for a bare pid (``guardian snapshot <pid>``): the process and all its descendants.

Reads every process's parent link and start time once through ``ProcFS`` and walks the tree
(``proctree``); each member's role comes from its command line, as discovery gives it.
"""

from __future__ import annotations

from vllm_guardian.discovery.scan import classify, is_api_server
from vllm_guardian.errors import GuardianError
from vllm_guardian import proctree
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target


def target_for_pid(procfs: ProcFS, pid: int, prefix: str = "VLLM") -> Target:
    """``pid`` first, then its descendants breadth-first. Raises ``TargetGone`` when the pid does not exist."""
    root = procfs.stat(pid)
    links: dict[int, tuple[int, int]] = {pid: (root.ppid, root.starttime)}  # pid -> (ppid, starttime)
    for p in procfs.pids():
        if p == pid:
            continue
        try:
            st = procfs.stat(p)
        except GuardianError:
            continue
        links[p] = (st.ppid, st.starttime)
    children = proctree.children_by_parent((p, ppid) for p, (ppid, _) in links.items())
    procs = []
    for p in proctree.walk(pid, children):
        ppid, start = links[p]
        try:
            cmd = procfs.cmdline(p)
        except GuardianError:
            cmd = ()
        role = Role.API_SERVER if is_api_server(cmd) else classify(cmd, prefix)
        procs.append(ProcessInfo(ProcKey(p, start), ppid, role, cmd))
    return Target(f"pid-{pid}", ProcKey(pid, root.starttime), tuple(procs), source="snapshot")

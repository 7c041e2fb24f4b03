"""A process in uninterruptible sleep (state D) in a watched tree. Made safely: a tiny C program
whose child is created with vfork() and sleeps; until the child exits the parent waits in the
kernel in D state (TASK_KILLABLE: it still dies on SIGKILL, so cleanup is certain). The guardian
keeps ticking, keeps answering, shows the D state, and a snapshot of the tree ends in bounded
time."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.support.guardian_process import GuardianProcess
from tests.support.wait import poll

VFORK_C = r"""
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 30;
    pid_t pid = vfork();
    if (pid == 0) { sleep(seconds); _exit(0); }
    return 0;
}
"""


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the vfork helper")
def test_a_d_state_process_in_the_tree_does_not_stall_the_guardian(tmp_path):
    src, exe = tmp_path / "vfork_d_state.c", tmp_path / "vfork-d-state"
    src.write_text(VFORK_C)
    subprocess.run(["cc", "-O0", "-o", str(exe), str(src)], check=True)
    holder = subprocess.Popen([str(exe), "60"])
    g = GuardianProcess(
        tmp_path,
        0,
        name="dstate",
        extra={"targets": [{"name": "dstate", "match": {"cmdline_regex": re.escape(str(exe))}}]},
    )
    try:
        assert poll(lambda: proc_state(holder.pid) == "D", 5), proc_state(holder.pid)
        g.start()
        t = poll(lambda: g.target("dstate"), 30)
        assert t, g.log_text()
        states = {p["pid"]: p["state"] for p in t["processes"]}
        assert states.get(holder.pid) == "D", t["processes"]
        st = g.status()
        assert st is not None
        first = st["guardian"]["ticks"]
        time.sleep(4)
        st = g.status()
        assert st is not None and st["guardian"]["ticks"] >= first + 2, "the loop stopped ticking"
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "snapshot", "dstate", "-c", str(g.config_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert time.monotonic() - t0 < 60, "a snapshot of a D-state tree did not end in bounded time"
        assert "Traceback" not in out.stderr, out.stderr
        assert g.status() is not None
    finally:
        with open(f"/proc/{holder.pid}/task/{holder.pid}/children") as f:
            children = [int(c) for c in f.read().split()]
        holder.kill()
        holder.wait()
        for child in children:  # the vfork child sleeps on: end it too
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert g.stop() == 0

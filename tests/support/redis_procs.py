"""Helpers for the embedded-Redis fault tests: which redis-servers serve a state dir, and a holder
process that keeps one running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def servers_for(state_dir) -> list[int]:
    """Pids of live redis-servers whose command line names this state dir's socket or config."""
    marks = (str(Path(state_dir) / "redis" / "redis.sock"), str(Path(state_dir) / "redis" / "redis.conf"))
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "redis-server" in cmd and state != "Z" and any(m in cmd for m in marks):
            out.append(int(entry))
    return sorted(out)


HOLDER = """
import sys, time
from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
e = EmbeddedRedis(sys.argv[1]); e.start(); print(e.pid, flush=True); time.sleep(600)
"""


def start_holder(state_dir) -> tuple[subprocess.Popen, int]:
    """A process that starts the embedded Redis and then hangs: a guardian to SIGKILL."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line)


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass

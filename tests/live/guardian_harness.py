"""Run the real ``guardian run`` against a real (simulated) vLLM server, and watch what it says.

Real parts only: a real kernel, real child processes, real /proc, real HTTP.
Observation is through the guardian's own outputs: the incident files under its
state dir and ``guardian status --json`` over its control socket.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from vllm_guardian.incidents import IncidentStore, incident_to_dict


def poll(pred, timeout: float, every: float = 0.2):
    """Return the first truthy value of ``pred()`` before ``timeout``, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    return None


class GuardianProcess:
    def __init__(self, tmp: Path, port: int, name: str = "sim", extra: dict | None = None) -> None:
        self.state_dir = tmp / "state"
        self.config_path = tmp / "guardian.yaml"
        self.log_path = tmp / "guardian.log"
        cfg = {
            "node": "live-test",
            "state_dir": str(self.state_dir),
            "autodiscover": False,  # only our server: other tests may run servers too
            "targets": [{"name": name, "match": {"port": port}}],
            "api": {"http": None},
        }
        for key, value in (extra or {}).items():
            cfg[key] = value
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen | None = None

    def start(self, *args: str, journal: bool = False) -> GuardianProcess:
        """``guardian run -c <config> *args``; ``journal``: its stderr is announced as journald's
        stream (``JOURNAL_STREAM`` = the log file's device:inode), as systemd does."""
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            env = dict(os.environ)
            env.pop("JOURNAL_STREAM", None)
            if journal:
                st = os.fstat(log.fileno())
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", str(self.config_path), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        return self

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def incidents(self) -> list[dict]:
        return [incident_to_dict(i) for i in IncidentStore(self.state_dir).list()]

    def wait_incident(self, kind: str, timeout: float) -> dict | None:
        return poll(lambda: next((i for i in self.incidents() if i["kind"] == kind), None), timeout)

    def status(self) -> dict | None:
        out = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "status", "--json", "-c", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return json.loads(out.stdout) if out.returncode == 0 else None

    def target(self, name: str = "sim") -> dict | None:
        st = self.status()
        if not st:
            return None
        return next((t for t in st["targets"] if t["name"] == name), None)

    def require_target(self, name: str = "sim") -> dict:
        """The target's entry in `guardian status --json`; the test fails when it is not listed."""
        t = self.target(name)
        assert t is not None, f"{name} is not in the status\n{self.log_text()}"
        return t

    def wait_ready(self, timeout: float, name: str = "sim") -> dict | None:
        return poll(lambda: (t := self.target(name)) and t["ready"] and t, timeout, every=0.5)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

"""Live: docs/simulator.md as a newcomer follows it — its command starts the simulated server, its
curl lines work as written (on another port), and every fault its table names is accepted.

Only the port changes (8000 may be taken on a test machine); everything else runs verbatim.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.support.wait import poll

pytestmark = pytest.mark.live

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"
FENCE = re.compile(r"^```\n(.*?)^```", re.M | re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def doc_lines(prefix: str) -> list[str]:
    return [
        line.strip() for body in FENCE.findall(DOC.read_text()) for line in body.splitlines() if line.startswith(prefix)
    ]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def server():
    start = doc_lines("python -m vllm_guardian.sim.vllm.api_server")[0]  # the quick start; data parallel follows
    port = free_port()
    argv = shlex.split(start.replace("--port 8000", f"--port {port}"))
    proc = subprocess.Popen([sys.executable, *argv[1:]], start_new_session=True)
    try:
        assert poll(lambda: healthy(port), 60, every=0.3), "the documented command did not bring a server up"
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def curl(line: str, port: int, max_time: float = 10) -> subprocess.CompletedProcess:
    argv = shlex.split(line.replace("localhost:8000", f"localhost:{port}"))
    return subprocess.run([argv[0], "--max-time", str(max_time), *argv[1:]], capture_output=True, text=True, timeout=60)


def test_the_documented_curl_lines_work_as_written(server):
    fault, state, completion = doc_lines("curl ")[:3]  # the quick start's; the data-parallel one follows
    res = curl(fault, server)
    assert res.returncode == 0 and json.loads(res.stdout)["fault"] == "busy_loop"
    res = curl(state, server)
    assert res.returncode == 0 and "busy_loop" in res.stdout
    res = curl(completion, server, max_time=5)  # the doc: the hang fires and it never answers
    assert res.returncode == 28, res.stdout + res.stderr  # curl's "operation timed out"


def test_every_fault_of_the_table_is_accepted(server):
    table = DOC.read_text().split("| fault |", 1)[1].split("\n\n", 1)[0]
    names = {
        n for row in table.splitlines() for n in re.findall(r"`([a-z_]+)`", row.split("|")[1] if "|" in row else "")
    }
    assert {"busy_loop", "stall", "die", "rss_leak", "kv_leak", "none", "swap_model"} <= names
    for name in sorted(names):  # armed or switched on only: nothing fires without a request
        body = json.dumps({"fault": name}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{server}/sim/fault", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, name

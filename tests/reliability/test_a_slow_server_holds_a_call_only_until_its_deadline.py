"""Fault 7: a server that drips a byte at a time holds an HTTP call only up to its timeout (a
deadline for the whole exchange, not per read); slow probes cannot starve evidence or
remediation; and a wedged job does not keep the process from exiting on SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Hashable

import pytest

from vllm_guardian.host.http import HttpError, StdlibHttpClient
from vllm_guardian.state.async_runner import AsyncRunner

from tests.support.slow_drip import SlowDripServer


@pytest.fixture
def drip():
    s = SlowDripServer(interval=0.05, duration=20.0)
    yield s
    s.close()


def test_a_slow_drip_server_times_out_at_the_deadline_for_the_whole_exchange(drip):
    with pytest.raises(HttpError) as info:
        StdlibHttpClient().request("GET", drip.url + "/metrics", timeout=0.5)
    assert info.value.reason == "timeout"


def test_a_slow_drip_during_the_headers_also_ends_at_the_deadline():
    s = SlowDripServer(interval=0.3, duration=20.0)
    try:
        with pytest.raises(HttpError) as info:
            StdlibHttpClient().request("GET", s.url + "/health", timeout=0.5)
        assert info.value.reason == "timeout"
    finally:
        s.close()


def test_probes_holding_every_worker_do_not_starve_evidence_or_remediation():
    runner = AsyncRunner(max_workers=2)
    gate = threading.Event()
    for i in range(8):
        runner.submit(("http", f"slow{i}"), gate.wait, deadline=100)
    runner.submit(("evidence", "inc1"), lambda: "bundle", deadline=100)
    runner.submit(("remediation", "t1"), lambda: "stopped", deadline=100)
    done: dict[Hashable, object] = {}
    deadline = time.monotonic() + 10
    while len(done) < 2 and time.monotonic() < deadline:
        done.update({d.key: d.result for d in runner.collect()})
        time.sleep(0.01)
    gate.set()
    runner.shutdown()
    assert done == {("evidence", "inc1"): "bundle", ("remediation", "t1"): "stopped"}


WEDGED = """
import threading
from vllm_guardian.state.async_runner import AsyncRunner
r = AsyncRunner(2)
r.submit(("http", "wedged"), threading.Event().wait, deadline=1)
print("submitted", flush=True)
r.shutdown()
"""


def test_a_wedged_job_does_not_keep_the_process_from_exiting():
    proc = subprocess.Popen([sys.executable, "-c", WEDGED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "submitted"
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "argv, host",
    [
        (["vllm", "serve", "--host", "collector.example.com"], "127.0.0.1"),  # a name is never followed
        (["vllm", "serve", "--host", "10.1.2.3"], "10.1.2.3"),
        (["vllm", "serve", "--host", "::1"], "::1"),
        (["vllm", "serve", "--host", "0.0.0.0"], "127.0.0.1"),
        (["vllm", "serve"], "127.0.0.1"),
    ],
)
def test_an_autodiscovered_server_is_reached_only_at_an_address_not_a_name(argv, host):
    from vllm_guardian.discovery.sockets import server_host

    assert server_host(argv) == host

"""A GPU falls off the bus while a simulated server's engine spins (`make demo-xid`): the fake NVML
behind the real NVML backend reports Xid 79 and GpuIsLost, the guardian runs with remediation on.
The busy loop's diagnosis names the Xid first, its restart is refused and escalated, the device's
accel_fault alert goes out on the alert channel, and the server is not restarted."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.live


def test_xid_79_during_a_hang_is_named_the_restart_refused_the_node_alerted_nothing_restarted():
    out = subprocess.run(
        [sys.executable, "-m", "vllm_guardian.testing.xid_demo", "--timeout", "150"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = out.stdout
    assert out.returncode == 0, text + out.stderr
    for line in (
        "ALERT firing accel_fault (opened) on nvml:0",
        "DIAGNOSIS first: device fault: nvml:0 reported Xid 79 (GPU has fallen off the bus)",
        "REFUSED restart: restart refused: device nvml:0 reported Xid 79",
        "CHECK ok   the busy_loop's diagnosis names Xid 79 first",
        "CHECK ok   nothing restarted",
        "FAULT: Xid 79 (GPU has fallen off the bus); a restart will not help",
        "every process the demo started is gone",
    ):
        assert line in text, line
    assert "CHECK FAILED" not in text

"""`guardian demo` (what `make demo` runs) finishes green and shows every stage."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.live


def test_the_demo_shows_detection_evidence_alert_restart_and_resolution():
    out = subprocess.run(
        [sys.executable, "-m", "vllm_guardian.cli.main", "demo", "--timeout", "150"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = out.stdout
    assert out.returncode == 0, text + out.stderr
    for stage in (
        "DETECTED busy_loop",
        "EVIDENCE captured before any action",
        "_ghost_key_spin",
        "ALERT firing busy_loop",
        "REMEDIATION draining",
        "REMEDIATION verifying",
        "ALERT resolved busy_loop",
        "RESOLVED",
        "every process the demo started is gone",
    ):
        assert stage in text, stage
    assert text.index("EVIDENCE captured") < text.index("REMEDIATION stopping")

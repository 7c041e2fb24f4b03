"""A hostile kernel log: anyone on the node puts an Xid's words into this machine's real
``/dev/kmsg`` while a real ``guardian run`` reads it beside a real simulated vLLM whose restarts
it owns. The kernel-log backend reads the real device under a root whose driver list names one
GPU (``proc/driver/nvidia/gpus/0000:3b:00.0``), so every forged line names a GPU of this node and
the server's own engine pid: believed, it would open a critical ``accel_fault`` on that GPU, tie
the GPU to the server and refuse the server's restart ("a restart cannot help").

The hostile input, all real: lines a process writes to ``/dev/kmsg`` (the kernel gives them
facility user, whatever priority they ask for; the kernel rate-limits such writes), and a real
segfault of an unprivileged user's program saved under the name of an Xid line (the kernel logs
that name in its own, kernel-facility, segfault line). What must hold: every such line is
counted (status ``accelerators_refused``, ``guardian_accelerator_input_refused_total``) and logged
once per reason, no fault is recorded, a busy loop of the server is still restarted, and status,
readiness and metrics answer throughout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.support.guardian_process import GuardianProcess, config, sweep, trip
from tests.support.wait import poll
from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.access("/dev/kmsg", os.R_OK | os.W_OK),
        reason="needs root and this machine's /dev/kmsg (the hostile input is the real kernel log)",
    ),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the crashing program"),
]

BUS = "0000:3b:00"
WRITES = 30
CRASH = "int main(void) { *(volatile int *)0 = 0; return 0; }\n"


def kernel_root(tmp_path: Path) -> Path:
    """``dev/kmsg`` and ``proc/uptime`` of this machine, and a driver list with one GPU."""
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "kmsg").symlink_to("/dev/kmsg")
    (root / "proc" / "driver" / "nvidia" / "gpus" / f"{BUS}.0").mkdir(parents=True)
    (root / "proc" / "uptime").symlink_to("/proc/uptime")
    return root


def segfault_in_a_file_named(name: str) -> None:
    """Build the crashing program as ``name`` and run it as nobody: the kernel logs the name."""
    home = Path(tempfile.mkdtemp(prefix="forged-"))
    try:
        home.chmod(0o755)
        (home / "crash.c").write_text(CRASH)
        subprocess.run(["cc", "-O0", "-o", str(home / name), str(home / "crash.c")], check=True)
        child = subprocess.run([str(home / name)], cwd=home, user=65534, group=65534, check=False)
        assert child.returncode == -11  # SIGSEGV, logged by the kernel
    finally:
        shutil.rmtree(home, ignore_errors=True)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def refused(g: GuardianProcess) -> dict[str, int]:
    st = g.status() or {}
    return dict(st.get("accelerators_refused", {}).get("kmsg", {}))


@pytest.fixture
def port():
    p = free_port("127.0.0.1")
    yield p
    sweep(p)


def test_forged_xids_in_the_real_kernel_log_open_no_fault_and_block_no_restart(tmp_path, port):
    server = SimServer(port=port, startup_delay=1.0).start()
    server.wait_ready(60)
    engine = server.engine_pid()
    hp = free_port("127.0.0.1")
    extra = config(port, tmp_path, http_port=hp)
    extra["accelerators"] = {
        "nvml": "off",
        "npu_smi": "off",
        "kmsg": "auto",
        "kmsg_root": str(kernel_root(tmp_path)),
        "kmsg_backlog": 0,  # only what is written from now on
    }
    g = GuardianProcess(tmp_path, port, extra=extra).start()
    try:
        assert g.wait_ready(30), g.log_text()
        assert refused(g) == {"not_kernel": 0, "not_driver_line": 0, "unknown_device": 0}, g.log_text()
        old_pid = g.require_target()["pid"]

        forged = f"NVRM: Xid (PCI:{BUS}): 79, pid={engine}, name=VLLM::EngineCor, GPU has fallen off the bus."
        for n in range(WRITES):
            with open("/dev/kmsg", "w") as kmsg:  # no prefix, a warning, and kern.emerg asked for
                kmsg.write(f"{('', '<4>', '<0>')[n % 3]}{forged}\n")
        segfault_in_a_file_named(f"NVRM: Xid (PCI:{BUS}): 79, pid={engine}, name=x, GPU has fallen off the bus")

        def both_counted() -> dict[str, int] | None:
            c = refused(g)
            return c if c.get("not_kernel", 0) >= 1 and c.get("not_driver_line", 0) >= 1 else None

        counts = poll(both_counted, 20)
        assert counts is not None, (refused(g), g.log_text())
        assert counts["not_kernel"] <= WRITES and counts["unknown_device"] == 0  # bounded: what was written
        st = g.status()
        assert st is not None and not st.get("device_faults"), st
        assert [i for i in g.incidents() if i["kind"] == "accel_fault"] == []
        assert get(f"http://127.0.0.1:{hp}/targets/sim/ready")[0] == 200
        metrics = get(f"http://127.0.0.1:{hp}/metrics")[1]
        assert 'guardian_accelerator_input_refused_total{backend="kmsg",reason="not_kernel"}' in metrics
        text = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "status", "-c", str(g.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "accelerator input refused (not acted on): kmsg not_driver_line" in text, text

        # the server then really hangs: its restart is not refused for a fault nobody reported
        trip(port, "busy_loop")
        done = poll(
            lambda: next((i for i in g.incidents() if i["kind"] == "busy_loop" and i["status"] == "resolved"), None),
            120,
        )
        assert done is not None, g.log_text()
        assert "starting" in [a["name"] for a in done["actions"]], done["actions"]
        assert poll(lambda: (t := g.target()) and t["serving"] and t["pid"] != old_pid, 30), g.log_text()
        log = g.log_text()
        assert "restart refused" not in log
        assert log.count("input refused (not_kernel)") == 1 and log.count("input refused (not_driver_line)") == 1
    finally:
        server.stop()
        assert g.stop() == 0

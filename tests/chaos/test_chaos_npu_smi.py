"""Hostile ``npu-smi`` output under a real ``guardian run`` beside a real simulated vLLM whose
restarts it owns, with ``accel_memory_leak`` set to remediate (so a forged or misread row could
restart the server). The fake ``npu-smi`` (the real subprocess runner runs it) shows the server's
engine holding 20000 MB, flat; then, phase by phase (its scenario file rewritten):

1. anyone's process on the NPU calls itself ``a|<line break>|0 0|<engine pid>|x`` (15 bytes,
   ``prctl(PR_SET_NAME)``) and grows 8 MB/s: printed raw, its row breaks the table, and the
   second half reads like a growing row of the engine;
2. ``npu-smi`` prints garbage (``dcmi module initialize failed``);
3. ``npu-smi`` prints its table with a power of ``inf``;
4. ``npu-smi`` hangs past its timeout;
5. the table is sane again.

What must hold: the broken rows are counted (``accelerators_refused``, the metric) and the engine's
own 20000 MB is still read through phase 1; each failing phase is a counted probe failure and an
error in the status, never a crash; no ``accel_memory_leak``, no restart (the server keeps its
pid); the loop keeps ticking and status, readiness and metrics answer; phase 5 reads again.
"""

from __future__ import annotations

import json
import time
from functools import partial
import urllib.request

import pytest

from tests.support.guardian_process import GuardianProcess, config, sweep
from tests.support.wait import poll
from vllm_guardian.host.accel import MIB
from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from vllm_guardian.testing.fake_npu_smi import render_info, write_fake_npu_smi

LEAKS = {"window": 30, "warmup": 0, "slope_bytes_per_s": 4_000_000, "mode": "remediate"}


def scenario(engine: int, **extra) -> dict:
    return {
        "layout": "a2",
        "devices": [{"npu": 0, "chip": 0, "hbm_total_mb": 65536, "base_mb": 3000}],
        "processes": [{"npu": 0, "chip": 0, "pid": engine, "name": "VLLM::EngineCor", "memory_mb": 20000}],
        **extra,
    }


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


@pytest.fixture
def port():
    p = free_port("127.0.0.1")
    yield p
    sweep(p)


def test_hostile_npu_smi_output_is_bounded_counted_and_moves_nothing(tmp_path, port):
    server = SimServer(port=port, startup_delay=1.0).start()
    server.wait_ready(60)
    engine = server.engine_pid()
    assert engine is not None
    fake = write_fake_npu_smi(tmp_path / "npu", scenario(engine))
    hp = free_port("127.0.0.1")
    extra = config(port, tmp_path, http_port=hp)
    extra["accelerators"] = {
        "nvml": "off",
        "kmsg": "off",
        "npu_smi": "auto",
        "npu_smi_path": str(fake.path),
        "npu_smi_timeout": 3,
    }
    extra["detectors"] = {"accel_memory_leak": LEAKS}
    g = GuardianProcess(tmp_path, port, extra=extra).start()
    t0 = time.monotonic()

    def phase(**change) -> None:
        fake.scenario.write_text(json.dumps(scenario(engine, **change)))
        fake.set_time(time.monotonic() - t0)

    wrapper = fake.path.read_text()

    def printing(text: str | None) -> None:
        """``npu-smi`` prints ``text`` as it is (None: the fake's wrapper again)."""
        out = tmp_path / "npu" / "out.txt"
        out.write_text(text or "")
        fake.path.write_text(wrapper if text is None else f"#!/bin/sh\ncat '{out}'\n")

    def engine_mb() -> float | None:
        t = g.target()
        rows = (t or {}).get("accelerators") or []
        return rows[0]["target_memory_bytes"] / MIB if rows else None

    def status_ok() -> dict:
        st = g.status()
        assert st is not None, g.log_text()
        assert get(f"http://127.0.0.1:{hp}/targets/sim/ready")[0] == 200
        return st

    def failing_with(error: str) -> bool:
        return error in str(status_ok()["errors"].get("accel:npu_smi"))

    try:
        assert g.wait_ready(30), g.log_text()
        assert poll(lambda: engine_mb() == 20000, 20), g.log_text()
        old_pid = g.require_target()["pid"]

        # 1. a process name that breaks the table, growing as a leak would
        grows = {"curve": "linear", "start": 1000, "rate": 7.63}
        hostile = {"npu": 0, "chip": 0, "pid": 9999, "name": f"a|\n|0 0|{engine}|x", "memory_mb": grows}
        phase(processes=[*scenario(engine)["processes"], hostile])
        counted = poll(lambda: status_ok()["accelerators_refused"].get("npu_smi", {}).get("broken_row", 0), 20)
        assert counted, g.log_text()
        for _ in range(8):  # 40 s: longer than the leak window; each read goes on, the engine's row its own
            fake.set_time(time.monotonic() - t0)
            time.sleep(5)
            assert engine_mb() == 20000, g.target()
            assert "accel:npu_smi" not in status_ok()["errors"], g.log_text()  # read, not failed: not blinded
        metrics = get(f"http://127.0.0.1:{hp}/metrics")[1]
        assert 'guardian_accelerator_input_refused_total{backend="npu_smi",reason="broken_row"}' in metrics

        # 2-4. garbage, a number that is not finite, a hang past the timeout: counted failures
        failures = status_ok()["probes"]["accel"]["failures"]
        sane = render_info(scenario(engine), 0.0)
        for change, text, error in (
            ({"fail": {"mode": "garbage"}}, None, "unrecognised npu-smi output"),
            ({}, sane.replace("90  ", "inf "), "not a finite number: 'inf'"),
            ({"fail": {"mode": "hang", "hang_s": 60}}, None, "timed out after 3s"),
        ):
            ticks = status_ok()["guardian"]["ticks"]
            printing(text)
            phase(**change)
            seen = poll(partial(failing_with, error), 20)
            assert seen, (error, status_ok()["errors"], g.log_text())
            st = status_ok()
            assert st["probes"]["accel"]["failures"] > failures and st["guardian"]["ticks"] > ticks
            failures = st["probes"]["accel"]["failures"]

        # 5. sane again: read again, nothing opened, nothing restarted
        printing(None)
        phase()
        assert poll(lambda: engine_mb() == 20000 and not status_ok()["errors"].get("accel:npu_smi"), 30), g.log_text()
        assert [i["kind"] for i in g.incidents()] == []
        t = g.require_target()
        assert t["pid"] == old_pid and t["serving"]
    finally:
        server.stop()
        assert g.stop() == 0

"""The incident page: self-contained HTML with the plots of the windows that fired and the verdict."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import pytest

from vllm_guardian.diagnosis.report_html import ReportInput, render_report, select_charts
from vllm_guardian.series import metrics as m
from tests.support.report_page import DIAG, INCIDENT, busy_series, page


def test_a_busy_loop_page_plots_the_hot_thread_progress_and_device_first():
    html = page()
    fired = html.split("The windows that fired")[1].split("<h2>")[0]
    assert re.findall(r'id="chart-(\w+)"', fired) == ["thread_cpu", "thread_vol", "progress", "accel_util"]
    assert "hot thread p200/t212" in fired and "busy threshold" in fired


def test_the_verdict_comes_first_with_the_workaround_and_the_idle_device():
    html = page()
    assert html.index('id="diagnosis"') < html.index("The windows that fired")
    assert "MM cache &lt;LRU&gt; spin" in html and "--mm-processor-cache-gb 0" in html
    assert "device idle while the engine spins" in html and "Fixed in:</b> vLLM 0.26.0" in html


def test_the_page_is_self_contained_and_runs_no_script():
    html = page()
    assert "<script" not in html.replace("data:image/svg+xml;base64,", "")
    assert not re.search(r'\bsrc=["\'](?!data:)', html)  # nothing is loaded from anywhere
    assert "<link" not in html


def test_every_chart_is_well_formed_svg():
    for svg in re.findall(r"<svg .*?</svg>", page(), flags=re.S):
        ElementTree.fromstring(svg)


def test_actions_have_durations_and_the_capture_its_steps():
    html = page()
    assert "30.5 s" in html and "evidence capture" in html and "4.2 s" in html and "py-spy dump pid 200" in html


def test_memory_charts_carry_the_fitted_slope():
    fired, rest = select_charts(busy_series(), "host_memory_leak", {})
    assert fired[0].key == "rss" and fired[0].lines[0].fit is not None
    assert abs(fired[0].lines[0].fit.slope - 1e6) < 1
    assert "fit 3.4 GiB/h" in render_report(ReportInput(dict(INCIDENT, kind="host_memory_leak"), "x", busy_series()))


def test_a_crash_is_shown_with_its_traceback():
    crash = {
        "exception": "AssertionError",
        "message": "boom",
        "process": "EngineCore_DP0",
        "pid": 7,
        "frames": [{"file": "/v/vllm/v1/core/sched/scheduler.py", "line": 5, "function": "schedule", "code": ""}],
        "chain": [],
        "text": "Traceback ...\nAssertionError: boom",
        "source": "file /x.log",
    }
    html = page(incident=dict(INCIDENT, kind="engine_dead"), crash=crash, diagnosis=[])
    assert 'id="crash"' in html and "scheduler.py:5 in schedule" in html and "No known signature matched" in html


@pytest.mark.parametrize("series", [{}, {m.THREAD_CPU: {}}], ids=["none", "empty-metric"])
def test_no_series_still_renders(series):
    html = page(series=series, flame_svg=None, flame_name=None)
    assert "The windows that fired" not in html and html.endswith("</html>")


def test_the_page_links_the_runbook_of_its_kind():
    from vllm_guardian.incidents.runbooks import runbook_url

    assert f"<a id='runbook' href='{runbook_url('busy_loop')}'>" in page()


def test_a_device_fault_leads_the_verdict_and_marks_its_row_in_the_accelerator_table():
    device_first = [
        {
            "id": "device-fault:xid:79",
            "title": "device fault: nvml:0 reported Xid 79 (GPU has fallen off the bus) at 02:41:07 UTC; "
            "a restart will not help",
            "confidence": 0.95,
            "advice": "reboot node: drain the node and reboot it",
        },
        *DIAG,
    ]
    rows = [
        {
            "device": "nvml:0",
            "name": "NVIDIA H200",
            "health": "lost",
            "fault_health": 2,
            "fault": "Xid 79 (GPU has fallen off the bus); a restart will not help",
        },
        {"device": "nvml:1", "name": "NVIDIA H200", "health": "OK", "fault_health": 0},
    ]
    html = page(diagnosis=device_first, accelerators=rows)
    verdict = html.split('id="diagnosis"')[1].split("</div>")[0]
    assert "Xid 79 (GPU has fallen off the bus)" in verdict and "device-fault:xid:79" in verdict
    table = html.split('id="accelerators"')[1].split("</table>")[0]
    assert table.count('<tr class="fault">') == 1 and "a restart will not help" in table

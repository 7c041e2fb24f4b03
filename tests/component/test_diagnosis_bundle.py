"""Evidence → diagnosis on real things: the real collector (real /proc, real py-spy) captures the LRU
program, and the diagnoser names the bug in diagnosis.json, summary.txt and report.html."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vllm_guardian.bundle.evidence import EvidenceCollector, EvidenceContext, default_locate
from vllm_guardian.bundle.pid_target import target_for_pid
from vllm_guardian.clock import SystemClock
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.diagnosis.service import Diagnoser
from vllm_guardian.host.http import StdlibHttpClient
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.incidents.store import IncidentStore
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef


def hot_tid(pid: int) -> int:
    """The thread whose CPU time grows: read twice from /proc."""
    proc = ProcFS()

    def ticks():
        out = {}
        for tid in proc.tids(pid):
            try:
                st = proc.read_text(f"{pid}/task/{tid}/stat")
            except Exception:  # noqa: BLE001
                continue
            rest = st[st.rindex(")") + 2 :].split()
            out[tid] = int(rest[11]) + int(rest[12])
        return out

    a = ticks()
    time.sleep(0.5)
    b = ticks()
    return max(b, key=lambda t: b[t] - a.get(t, 0))


def test_a_captured_bundle_of_the_real_lru_spin_is_diagnosed(lru_program, tmp_path):
    if default_locate("py-spy") is None:
        pytest.skip("py-spy is not installed next to this Python")
    pid = lru_program.pid
    target = target_for_pid(ProcFS(), pid)
    tid = hot_tid(pid)
    inc = Incident(
        "01JDIAG0000000000000000000",
        Kind.BUSY_LOOP,
        Severity.CRITICAL,
        "node-1",
        TargetRef(target.name, pid, target.key.starttime, None),
        Status.FIRING,
        f"thread {tid} at 100 % CPU, no progress",
        time.time(),
        {"pid": pid, "tid": tid},
    )
    store = IncidentStore(tmp_path)
    collector = EvidenceCollector(
        EvidenceConfig(record_seconds=1.0), store.dir_for, SubprocessRunner(), ProcFS(), SystemClock()
    )
    res = collector.capture(
        EvidenceContext(inc, target, pid, {"thread.cpu_ratio": {f"p{pid}/t{tid}": [[1.0, 1.0], [2.0, 1.0]]}})
    )
    assert any(f.startswith("pyspy-") for f in res.files), res.failures
    rows = [{"device": "npu:0.0", "utilization_pct": 0.0, "processes": [{"pid": pid, "target": target.name}]}]

    class Version(BaseHTTPRequestHandler):  # the server's GET /version, as vLLM answers it
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = json.dumps({"version": "0.11.0"}).encode() if self.path == "/version" else b"{}"
            self.send_response(200 if self.path == "/version" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    api = ThreadingHTTPServer(("127.0.0.1", 0), Version)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        out = Diagnoser(all_signatures(load_catalogs()), http=StdlibHttpClient()).diagnose_bundle(
            res.dir, inc, accelerators=rows, api_url=f"http://127.0.0.1:{api.server_address[1]}"
        )
    finally:
        api.shutdown()
    assert out.diagnosis[0]["id"] == "vllm-mm-cache-lru-busy-loop"
    assert out.vllm_version == "0.11.0"
    assert out.diagnosis[0]["notes"] == ["this server runs vLLM 0.11.0; fixed in 0.26.0"]
    assert out.notes == ("device idle while the engine spins (accelerator 0 %)",)
    doc = json.loads((res.dir / "diagnosis.json").read_text())
    assert doc["diagnosis"][0]["workaround"].startswith("start vLLM with --mm-processor-cache-gb 0")
    summary = (res.dir / "summary.txt").read_text()
    assert summary.index("Diagnosis: Multi-modal processor cache") < summary.index("Capture:")
    html = (res.dir / "report.html").read_text()
    assert 'id="diagnosis"' in html and "popitem" in html and "<svg" in html

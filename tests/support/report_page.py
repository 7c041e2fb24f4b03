"""One incident page rendered from a busy-loop incident with its series, diagnosis and flame graph
(``page(**overrides)``): the unit tier reads its HTML, the component tier draws it in a browser."""

from __future__ import annotations


from vllm_guardian.diagnosis.report_html import ReportInput, render_report
from vllm_guardian.series import metrics as m


HOT = "p200/t212"


def busy_series(n: int = 30) -> dict:
    ts = [100.0 + i for i in range(n)]
    return {
        m.THREAD_DEMAND: {HOT: [[t, 1.0] for t in ts]},
        m.THREAD_CPU: {HOT: [[t, 0.98] for t in ts], "p200/t200": [[t, 0.0] for t in ts]},
        m.THREAD_VOL_RATE: {HOT: [[t, 0.0] for t in ts]},
        m.ITERATIONS: {"": [[t, 500.0] for t in ts]},
        m.GEN_TOKENS: {"": [[t, 9000.0] for t in ts]},
        m.REQ_RUNNING: {"": [[t, 0.0] for t in ts]},
        m.REQ_WAITING: {"": [[t, float(i)] for i, t in enumerate(ts)]},
        m.ACCEL_UTIL: {"": [[t, 0.0] for t in ts]},
        m.PROC_RSS: {"p200": [[t, 2e9 + 1e6 * i] for i, t in enumerate(ts)]},
        m.ACCEL_MEM: {"": [[t, 3e10] for t in ts]},
        m.KV_USAGE: {"": [[t, 0.1] for t in ts]},
    }


INCIDENT = {
    "id": "01JABCDEF",
    "kind": "busy_loop",
    "severity": "critical",
    "node": "n1",
    "status": "firing",
    "summary": "EngineCore thread 212 at 100 % CPU with no progress",
    "opened_at": 1764565000.0,
    "target": {"name": "vllm-8000", "pid": 100, "starttime": 5, "port": 8000},
    "signals": {"pid": 200, "tid": 212, "threshold_cpu_ratio": 0.9},
    "actions": [
        {"name": "evidence", "status": "ok", "at": 1764565001.0, "detail": ""},
        {"name": "restart", "status": "ok", "at": 1764565031.5, "detail": "SIGTERM tree"},
    ],
}


DIAG = [
    {
        "id": "vllm-mm-cache-lru-busy-loop",
        "title": "MM cache <LRU> spin",
        "confidence": 0.95,
        "matched": ['hot thread "process_input_sockets" in LRUCache.popitem (vllm/utils/cache.py)'],
        "references": ["https://github.com/vllm-project/vllm/issues/43941"],
        "workaround": "--mm-processor-cache-gb 0",
        "fixed_in": "0.26.0",
        "source": "vLLM #43941",
        "confirmed": ["x"],
        "inferred": ["y"],
        "catalog": "c 1",
    }
]


FLAME = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>alert(1)</script></svg>'


def page(**kw) -> str:
    base = dict(
        incident=INCIDENT,
        bundle_id="01JABCDEF",
        series=busy_series(),
        diagnosis=DIAG,
        notes=("device idle while the engine spins (accelerator 0 %)",),
        flame_svg=FLAME,
        flame_name="flame-200.svg",
        capture={
            "started_at": 1764565001.0,
            "duration_s": 4.2,
            "complete": True,
            "files": [{"name": "series.json", "bytes": 10}],
            "steps": [{"what": "dump", "pid": 200, "mode": "blocking", "rc": 0, "duration_s": 0.03}],
        },
    )
    base.update(kw)
    return render_report(ReportInput(**base))  # type: ignore[arg-type]

"""A key written by a crashed server into its log, in any shape of the shared corpus, reaches none
of the guardian's outputs: its log, status, /metrics, incident.json, the alert event, report.html,
summary.txt (the daemon end to end on a fake /proc and HTTP, as tests/component/test_daemon_crash.py)."""

from __future__ import annotations

import json
import logging
import os

from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_guardian.diagnosis.report_html import write_report
from vllm_guardian.host.http import HttpError
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.incidents.store import incident_to_dict
from vllm_guardian.model import Kind
from vllm_guardian.sinks.events import event_from_incident
from vllm_guardian.surface.exporter import build_registry
from vllm_guardian.testing.secret_shapes import NAMED_SHAPES, secrets

from tests.support.daemon_world import API, ENGINE, TRACKER, World

TRACEBACK = """\
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] Traceback (most recent call last):
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]   File "/v/vllm/v1/engine/core.py", line 1001, in run_engine_core
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] RuntimeError: refused while serving {line}
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600] EngineDeadError: see above {line}
"""  # noqa: E501


def _crash_log(shape: str, secret: str) -> str:
    line = shape.format(s=secret)
    startup = f"(APIServer pid=100) INFO 12-01 05:50:00 [utils.py:233] non-default args: {{'api_key': ['{secret}']}}\n"
    return startup + f"(APIServer pid=100) INFO 12-01 05:50:01 {line}\n" + TRACEBACK.format(line=line)


def _strings(node: Any) -> Iterator[str]:
    """Every key and string value of a JSON document: the only places text travels in it."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _text_of(name: str, text: str) -> str:
    """The text an output carries, where a secret could travel: for the Prometheus exposition, its
    names, help and label values (a sample value is a float, and the guardian's own process metrics
    print floats such as ``1.7962045780000002e+09`` that hold any run of digits by chance); for a
    JSON document, its keys and strings; anything else as written."""
    if name == "metrics":
        parts = []
        for family in text_string_to_metric_families(text):
            parts += [family.name, family.documentation]
            for sample in family.samples:
                parts += [sample.name, *sample.labels.keys(), *sample.labels.values()]
        return "\n".join(parts)
    if name.endswith(".jsonl"):
        return "\n".join(s for line in text.splitlines() if line.strip() for s in _strings(json.loads(line)))
    if name.endswith(".json") or name in ("status", "alert event", "crash"):
        return "\n".join(_strings(json.loads(text)))
    return text


def _every_output(world: World, caplog) -> dict[str, str]:
    store = IncidentStore(world.cfg.state_dir)
    (inc,) = [i for i in store.list() if i.kind is Kind.ENGINE_DEAD]
    path = os.path.join(world.cfg.state_dir, "incidents")
    files = {}
    for root, _dirs, names in os.walk(world.cfg.state_dir):
        for n in names:
            if n.endswith((".json", ".txt", ".html", ".jsonl")):
                with open(os.path.join(root, n), encoding="utf-8", errors="replace") as fh:
                    files[os.path.relpath(os.path.join(root, n), path)] = fh.read()
    snapshot = world.d.status()
    doc = snapshot.to_dict()
    report = write_report(inc.evidence_dir, incident_to_dict(inc)) if inc.evidence_dir else None
    return {
        **files,
        "status": json.dumps(doc),
        "metrics": generate_latest(build_registry(lambda: snapshot)).decode(),
        "alert event": json.dumps(event_from_incident(inc, "n1", 1.7e9, reason="opened")),
        "report.html": report.read_text() if report else "",
        "crash": json.dumps(inc.crash),
        "log": caplog.text,
    }


def _crash(world: World) -> None:
    world.step(4)
    for pid in (ENGINE, TRACKER, API):
        world.proc.remove(pid)
    world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
    world.step(6)


def _world(tmp_path, log_text: str) -> World:
    log = tmp_path / "vllm.log"
    log.write_text(log_text)
    return World(
        tmp_path,
        config={
            "autodiscover": False,
            "targets": [{"name": "llm", "match": {"cmdline_regex": "--port 8000"}, "log_path": str(log)}],
        },
    )


def test_a_key_in_a_crashed_servers_log_reaches_no_output(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "sk-live-Zx9Qw8Er7Ty6Ui5Op4"
    world = _world(tmp_path, _crash_log("Namespace(api_key='{s}', port=8000)", secret))
    try:
        _crash(world)
        outputs = _every_output(world, caplog)
    finally:
        world.d.runner.shutdown()
    assert outputs["crash"] != "null" and "RuntimeError" in outputs["crash"]  # the crash section was made
    assert "report.html" in outputs and outputs["report.html"]
    leaked = [name for name, text in outputs.items() if secret in _text_of(name, text)]
    assert leaked == []


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(secret=secrets(), shape=st.sampled_from(NAMED_SHAPES))
def test_no_generated_secret_in_any_shape_reaches_any_output(tmp_path_factory, caplog, secret, shape):
    assume(secret not in _crash_log(shape, ""))  # 'password' in 'password={s}' is the log's own text, no leak
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    tmp_path = tmp_path_factory.mktemp("w")
    world = _world(tmp_path, _crash_log(shape, secret))
    try:
        _crash(world)
        outputs = _every_output(world, caplog)
    finally:
        world.d.runner.shutdown()
    leaked = [name for name, text in outputs.items() if secret in _text_of(name, text)]
    assert leaked == [], f"{secret!r} in {shape!r} reached {leaked}"


def test_the_leak_check_sees_text_and_not_the_digits_of_a_float():
    metrics = (
        "# HELP process_start_time_seconds Start time.\n# TYPE process_start_time_seconds gauge\n"
        "process_start_time_seconds 1.7962045700000002e+09\n"
        "# HELP guardian_up Up.\n# TYPE guardian_up gauge\n"
        'guardian_up{target="sk-leaked-key-1"} 1.0\n'
    )
    status = json.dumps({"started": 1796204570.0000002, "detail": ["sk-leaked-key-2"]})
    seen = _text_of("metrics", metrics) + _text_of("status", status)
    assert "00000000" not in seen
    assert "sk-leaked-key-1" in seen and "sk-leaked-key-2" in seen

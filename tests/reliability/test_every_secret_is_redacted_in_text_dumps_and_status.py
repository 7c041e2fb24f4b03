"""Fault 15: every value of ``--api-key k1 k2`` is redacted in free text, a local named like a
secret is redacted in the text dump as in the JSON one, and the status document's cmdline
is redacted too."""

from __future__ import annotations

import json
import logging

from vllm_guardian.bundle.pyspy import Frame, Local, ThreadStack, render_text
from vllm_guardian.redact import REDACTED as R
from vllm_guardian.redact import redact_text
from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_runner import FakeRunner


def test_every_value_after_a_secret_option_is_redacted_in_text():
    text = "Process 9: vllm serve m --api-key k1 k2 k3 --port 8000"
    assert redact_text(text) == f"Process 9: vllm serve m --api-key {R} {R} {R} --port 8000"


def test_a_secret_local_is_redacted_in_the_rendered_text_dump():
    frame = Frame("serve", "server.py", 10, locals=(Local("api_key", "'sk-live-123'", arg=True), Local("port", "8000")))
    text = render_text([ThreadStack(1, 1, "MainThread", True, True, (frame,))], pid=9)
    assert "sk-live-123" not in text
    assert f"api_key: {R}" in text and "port: 8000" in text


def test_a_secret_local_in_py_spys_own_text_output_is_redacted():
    raw = (
        'Thread 9 (active): "MainThread"\n    serve (server.py:10)\n        Arguments:\n'
        "            api_key: 'sk-live-123'\n            port: 8000\n"
    )
    out = redact_text(raw)
    assert "sk-live-123" not in out and "port: 8000" in out


def test_the_status_cmdline_is_redacted(tmp_path):
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(
        100,
        1,
        (
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--port",
            "8000",
            "--api-key",
            "sk-live-1",
            "sk-live-2",
        ),
    )
    http = FakeHttp(
        {
            ("GET", "/health"): ok(),
            ("GET", "/metrics"): ok(""),
            ("GET", "/v1/models"): ok(json.dumps({"data": [{"id": "m"}]})),
        }
    )
    cfg = parse_config({"node": "n1", "state_dir": str(tmp_path / "state"), "api": {"http": None}})
    d = build_daemon(
        cfg, Seams(FakeClock(), proc.procfs(), http, FakeRunner(), FakeControl(set())), log=logging.getLogger("t")
    )
    d.tick()
    doc = json.dumps(d.status().to_dict())
    assert "sk-live" not in doc
    d.runner.shutdown()

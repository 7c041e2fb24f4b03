"""Crash forensics on real things: a dying child's traceback, read from each kind of log source."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllm_guardian.config.schema import KubernetesMatch, MatchConfig, RestartConfig, TargetConfig
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.diagnosis.forensics import crash_headline, crash_report
from vllm_guardian.diagnosis.log_tail import LogSource, choose_source, read_tail, tail_file
from vllm_guardian.diagnosis.matcher import Observation
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.host.runner import SubprocessRunner

SIGS = all_signatures(load_catalogs())

SCHEDULER = """
def schedule(running):
    for req in running:
        assert req["state"] != "preempted", f"request {req['id']} rescheduled while preempted"
"""

ENGINE_LOGGING = '''
import logging
import os
import sys


class NewLineFormatter(logging.Formatter):
    """vLLM's formatter (vllm/logging_utils/formatter.py): the prefix repeated on every line."""

    def format(self, record):
        msg = super().format(record)
        if record.message != "":
            parts = msg.split(record.message)
            msg = msg.replace("\\n", "\\r\\n" + parts[0])
        return msg


handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(NewLineFormatter("(EngineCore_DP0 pid=%(process)d) %(levelname)s %(asctime)s "
                                      "[%(filename)s:%(lineno)d] %(message)s", "%m-%d %H:%M:%S"))
logger = logging.getLogger("vllm.v1.engine.core")
logger.addHandler(handler)
logger.setLevel(logging.INFO)
from vllm.v1.core.sched.scheduler import schedule

import multiprocessing


def run_engine_core():
    """As vLLM's: log the fatal error, then re-raise (multiprocessing prints it again on stderr)."""
    logger.info("engine started --api-key sk-SECRET123")
    try:
        schedule([{"id": "r1", "state": "running"}, {"id": "r2", "state": "preempted"}])
    except Exception:
        logger.exception("EngineCore encountered a fatal error.")
        raise


if __name__ == "__main__":
    proc = multiprocessing.get_context("fork").Process(target=run_engine_core, name="EngineCore_DP0")
    proc.start()
    proc.join()
    sys.exit(proc.exitcode)
'''

ENGINE = '''
import os
import sys


class Prefixed:
    """vLLM's decorate_logs: every line a process writes starts with (<name> pid=<pid>)."""

    def __init__(self, stream, name):
        self.stream, self.prefix, self.fresh = stream, f"({name} pid={os.getpid()}) ", True

    def write(self, text):
        for part in text.splitlines(keepends=True):
            if self.fresh:
                self.stream.write(self.prefix)
            self.stream.write(part)
            self.fresh = part.endswith("\\n")
        return len(text)

    def flush(self):
        self.stream.flush()


sys.stdout = Prefixed(sys.__stdout__, "EngineCore_DP0")
sys.stderr = Prefixed(sys.__stderr__, "EngineCore_DP0")
from vllm.v1.core.sched.scheduler import schedule

print("INFO engine started --api-key sk-SECRET123")
schedule([{"id": "r1", "state": "running"}, {"id": "r2", "state": "preempted"}])
'''


@pytest.fixture(scope="module", params=["prefixed-stderr", "vllm-logging"])
def dying_child_log(tmp_path_factory, request):
    """Runs a child that dies with an AssertionError from .../vllm/v1/core/sched/scheduler.py; its log.
    ``prefixed-stderr``: Python's own traceback, every line prefixed; ``vllm-logging``: vLLM's
    ``logger.exception`` through its formatter (process prefix and log header on every line)."""
    root = tmp_path_factory.mktemp("engine")
    engine = ENGINE if request.param == "prefixed-stderr" else ENGINE_LOGGING
    for rel, text in {
        "site/vllm/__init__.py": "",
        "site/vllm/v1/__init__.py": "",
        "site/vllm/v1/core/__init__.py": "",
        "site/vllm/v1/core/sched/__init__.py": "",
        "site/vllm/v1/core/sched/scheduler.py": SCHEDULER,
        "engine.py": engine,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    log = root / "server.log"
    with open(log, "wb") as f:
        f.write(b"(APIServer pid=1) INFO Started server process\n")
        f.flush()
        rc = subprocess.run(
            [sys.executable, str(root / "engine.py")],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={"PYTHONPATH": str(root / "site"), "PATH": "/usr/bin:/bin"},
            timeout=60,
        ).returncode
        f.write(b"(APIServer pid=1) ERROR AsyncLLM output_handler failed.\n")
    assert rc == 1
    return log


def test_a_real_dying_childs_traceback_is_named_from_its_log_file(dying_child_log):
    tail = read_tail(LogSource("file", str(dying_child_log)))
    report = crash_report(tail, SIGS, Observation("engine_dead"))
    doc = report.to_dict()
    assert doc["exception"] == "AssertionError" and doc["process"] == "EngineCore_DP0"
    assert doc["message"] == "request r2 rescheduled while preempted"
    assert doc["frames"][-1]["file"].endswith("vllm/v1/core/sched/scheduler.py")
    assert doc["frames"][-1]["function"] == "schedule"
    assert report.matches[0].id == "vllm-scheduler-assertion"
    assert crash_headline(doc).startswith(
        "AssertionError: request r2 rescheduled while preempted (EngineCore_DP0, at scheduler.py:"
    )
    assert "sk-SECRET123" not in json.dumps(doc)  # secrets redacted as in evidence


def test_the_read_is_bounded_to_the_files_end(tmp_path):
    f = tmp_path / "big.log"
    f.write_text("x" * 100 + "\n" + "".join(f"line {i}\n" for i in range(10000)))
    lines, cut = tail_file(f, max_bytes=1000)
    assert cut and lines[-1] == "line 9999" and all(x.startswith("line ") for x in lines)
    assert sum(len(x) + 1 for x in lines) <= 1000


def test_journalctl_is_read_through_the_command_runner(dying_child_log, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "journalctl"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n[ "$1" = -u ] && [ "$2" = vllm.service ] || exit 3\ncat {dying_child_log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    tail = read_tail(LogSource("journal", "vllm.service"), runner=SubprocessRunner())
    doc = crash_report(tail, SIGS, Observation("engine_dead")).to_dict()
    assert doc["source"] == "journalctl -u vllm.service" and doc["exception"] == "AssertionError"


def test_the_previous_containers_log_comes_from_the_kubernetes_api(dying_child_log):
    seen = []

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.path)
            data = dying_child_log.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = KubeClient(
            f"http://127.0.0.1:{server.server_address[1]}", "tok", None, "node-1", plain_http_loopback=True
        )
        src = LogSource("kubernetes", "llm/vllm-0/vllm", "llm", "vllm-0", "vllm")
        report = crash_report(read_tail(src, kube=lambda: client), SIGS, Observation("engine_dead"))
    finally:
        server.shutdown()
    assert seen == ["/api/v1/namespaces/llm/pods/vllm-0/log?previous=true&limitBytes=262144&container=vllm"]
    assert report.crash is not None and report.crash.exception == "AssertionError"
    assert report.matches[0].id == "vllm-scheduler-assertion"


def _tc(**kw):
    return TargetConfig(name="t", match=kw.pop("match", MatchConfig(port=8000)), **kw)


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (
            _tc(restart=RestartConfig(mode="command", command=("vllm",), log_file="/var/log/v.log")),
            ("file", "/var/log/v.log"),
        ),
        (_tc(restart=RestartConfig(mode="systemd", unit="vllm.service")), ("journal", "vllm.service")),
        (_tc(match=MatchConfig(systemd_unit="vllm@a.service")), ("journal", "vllm@a.service")),
        (
            _tc(match=MatchConfig(kubernetes=KubernetesMatch(namespace="llm", pod="vllm-0", container="c"))),
            ("kubernetes", "llm/vllm-0/c"),
        ),
        (_tc(log_path="/srv/v.log", restart=RestartConfig(mode="systemd", unit="u")), ("file", "/srv/v.log")),
        (_tc(), None),
        (None, None),
    ],
)
def test_the_log_source_follows_the_targets_config(cfg, expected):
    src = choose_source(cfg)
    assert (src and (src.kind, src.where)) == expected if expected else src is None


def test_no_source_and_unreadable_sources_say_why(tmp_path):
    assert "set log_path" in (read_tail(None).error or "")
    assert "no such file" in (read_tail(LogSource("file", str(tmp_path / "nope.log"))).error or "")
    report = crash_report(read_tail(LogSource("file", str(Path(__file__)))), SIGS, Observation("engine_dead"))
    assert report.crash is None and (report.error or "").startswith("no Python traceback in the last")
    assert report.to_dict()["exception"] is None

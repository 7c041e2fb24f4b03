"""Every parser of outside text, fed mutated real samples and random text (hypothesis): it
either returns or raises the one error type it documents, and it does so in bounded time.

What each parser may raise: the /proc parsers ``ValueError``; the /metrics parser and the
npu-smi parsers ``ProbeFailed``; the py-spy output parsers ``ValueError`` (and whatever they
return renders and scrubs without raising); the config loader ``ConfigError``; the control
socket answers every byte string with one JSON line and keeps serving; the sock_diag answer
parser ``ValueError``; the diagnosis catalog loader ``CatalogError``.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_guardian.bundle import pyspy
from vllm_guardian.redact import redact_argv, redact_text
from vllm_guardian.surface.control_socket import ControlSocket
from vllm_guardian.config.loader import load_yaml, parse_config
from vllm_guardian.diagnosis.catalog_load import parse_catalog
from vllm_guardian.errors import CatalogError, ConfigError, ProbeFailed
from vllm_guardian.host import procfs_parse as pp
from vllm_guardian.host.accel.npu_smi_parse import parse_info, parse_usages
from vllm_guardian.host.sockdiag import parse_answer
from vllm_guardian.probes.vllm_metrics_parse import parse_vllm_metrics

FIX = Path(__file__).parent.parent / "fixtures"
FUZZ = settings(
    max_examples=int(os.environ.get("GUARDIAN_FUZZ_EXAMPLES", "200")),
    deadline=timedelta(seconds=2),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

STAT = (
    "5034 (cat) R 5029 5029 2734 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 16354 3133440 393 "
    "18446744073709551615 94665932169216 94665932189097 140727217426352 0 0 0 0 0 0 0 0 0 17 0 "
    "0 0 0 0 0 94665932205104 94665932206720 94666834976768 140727217433304 140727217433324 "
    "140727217433324 140727217434603 0\n"
)
STATUS = (
    "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t100\nNgid:\t0\nPid:\t100\nPPid:\t1\n"
    "Threads:\t4\nVmRSS:\t  102400 kB\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t545\n"
)
SYSCALL = "7 0x7ffd 0x1 0x0 0x0 0x0 0x0 0x7ffd0 0x7f00\n"
NET_TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 "
    "0000000000000000 100 0 0 10 0\n"
)
# a sock_diag answer from a real kernel: one dual-stack socket on [::]:8001, then NLMSG_DONE
DIAG = bytes.fromhex(
    "840000001400020001000000843900000a0a00001f410000000000000000000000000000000000000000000000000000"
    "000000000000000000000000050000000000000000000000000000008000000000000000198301000500080000000000"
    "05000b000000000008000f00000000000c00150001000000000000000600160012000000140000000300020001000000"
    "8439000000000000"
)
PYSPY_TEXT = (
    "Process 200: VLLM::EngineCore\nPython v3.12.3 (/usr/bin/python3)\n\n"
    'Thread 200 (active+gil): "MainThread"\n    _spin (engine.py:10)\n        Arguments:\n'
    '            n: 3\n    step (core.py:22)\nThread 201 (idle): "ZMQbg/IO/0"\n'
)
PYSPY_JSON = json.dumps(
    [
        {
            "pid": 200,
            "thread_id": 1,
            "thread_name": "MainThread",
            "os_thread_id": 200,
            "active": True,
            "owns_gil": True,
            "frames": [
                {
                    "name": "_spin",
                    "filename": "/e.py",
                    "module": None,
                    "short_filename": "e.py",
                    "line": 10,
                    "locals": [{"name": "api_key", "addr": 1, "arg": True, "repr": "'sk-1'"}],
                }
            ],
        }
    ]
)
CONFIG = (Path(__file__).parents[2] / "configs" / "examples" / "kubernetes.yaml").read_text()


def _fixtures(folder: str) -> list[str]:
    return [p.read_text() for p in sorted((FIX / folder).glob("*.txt"))]


@st.composite
def mutated(draw, samples: list[str]) -> str:
    """A real sample with a few random edits: characters inserted, deleted, replaced, lines
    duplicated or dropped, or the text cut short."""
    text = draw(st.sampled_from(samples))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "cut", "dup_line", "drop_line"]))
        at = draw(st.integers(0, max(0, len(text))))
        if op == "insert":
            text = text[:at] + draw(st.text(max_size=8)) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 16)) :]
        elif op == "replace" and text:
            at = min(at, len(text) - 1)
            text = text[:at] + draw(st.characters()) + text[at + 1 :]
        elif op == "cut":
            text = text[:at]
        else:
            lines = text.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines[i : i + 1] = [lines[i]] * (2 if op == "dup_line" else 0)
                text = "".join(lines)
    return text


def texts(samples: list[str]):
    return st.one_of(mutated(samples), st.text(max_size=400))


# ---------------------------------------------------------------- /proc
@FUZZ
@given(texts([STAT]))
def test_proc_stat(text):
    try:
        pp.parse_stat(text)
    except ValueError:
        pass


@FUZZ
@given(texts([STATUS]))
def test_proc_status(text):
    try:
        pp.parse_status(text)
    except ValueError:
        pass


@FUZZ
@given(texts([SYSCALL, "running\n", "-1 0x7ffd 0x7f00\n"]))
def test_proc_syscall(text):
    try:
        pp.parse_syscall(text)
    except ValueError:
        pass


@FUZZ
@given(texts(["123 456 7\n"]))
def test_proc_schedstat(text):
    try:
        pp.parse_schedstat(text)
    except ValueError:
        pass


@FUZZ
@given(texts(["rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 0\n"]))
def test_proc_io(text):
    try:
        pp.parse_io(text)
    except ValueError:
        pass


@FUZZ
@given(texts(["do_epoll_wait", "0", ""]))
def test_proc_wchan(text):
    pp.parse_wchan(text)


@FUZZ
@given(st.binary(max_size=300))
def test_proc_cmdline(raw):
    assert all(isinstance(a, str) for a in pp.parse_cmdline(raw))


@FUZZ
@given(texts([NET_TCP]), st.sampled_from(["little", "big"]))
def test_proc_net_tcp(text, order):
    try:
        pp.parse_net_tcp(text, order)
    except ValueError:
        pass
    for sock in pp.parse_listening_sockets(text, order):  # never raises: a bad row is skipped
        assert 0 <= sock.port <= 0xFFFF and isinstance(sock.inode, int) and sock.address


@FUZZ
@given(
    st.one_of(st.binary(max_size=400), st.builds(lambda b, at: b[:at], st.sampled_from([DIAG]), st.integers(0, 200)))
)
def test_sock_diag_answer(data):
    try:
        answer = parse_answer(data)
    except ValueError:
        return
    assert all(0 <= s.port <= 0xFFFF and s.v6only in (None, True, False) for s in answer.listeners)


# ---------------------------------------------------------------- /metrics
@FUZZ
@given(texts(_fixtures("metrics")))
def test_vllm_metrics(text):
    try:
        out = parse_vllm_metrics(text)
    except ProbeFailed:
        return
    assert all(isinstance(v, float) for v in out.values())


# ---------------------------------------------------------------- npu-smi
@FUZZ
@given(texts(_fixtures("npu_smi")))
def test_npu_smi_info(text):
    try:
        parse_info(text)
    except ProbeFailed:
        pass


@FUZZ
@given(texts(_fixtures("npu_smi")))
def test_npu_smi_usages(text):
    try:
        parse_usages(text)
    except ProbeFailed:
        pass


# ---------------------------------------------------------------- py-spy output
@FUZZ
@given(texts([PYSPY_JSON]))
def test_pyspy_dump_json(text):
    try:
        threads = pyspy.parse_dump_json(text)
    except ValueError:
        threads = ()
    pyspy.render_text(threads, pid=1)
    pyspy.pick_thread(threads)
    pyspy.scrub_dump_json(text)


@FUZZ
@given(texts([PYSPY_TEXT]))
def test_pyspy_dump_text(text):
    try:
        threads = pyspy.parse_dump_text(text)
    except ValueError:
        threads = ()
    pyspy.render_text(threads)


@FUZZ
@given(st.text(max_size=400), st.one_of(st.none(), st.integers(-5, 300)), st.booleans())
def test_pyspy_errors(stderr, rc, timed_out):
    pyspy.error_message(stderr)
    pyspy.classify(rc, stderr, timed_out, 5.0)


@FUZZ
@given(st.text(max_size=400), st.lists(st.text(max_size=20), max_size=12))
def test_redaction(text, argv):
    redact_text(text)
    assert len(redact_argv(argv)) == len(argv)


# ---------------------------------------------------------------- gate reports from the Redis channel
REPORT = json.dumps(
    {
        "instance_id": "node-a/t",
        "request_id": "r1",
        "timestamp": 1767225600,
        "check_level": "L3",
        "type": "nan",
        "details": {"output": "!!!", "x": [[1, {"y": "z"}]]},
        "kid": "gw",
        "sig": "0" * 64,
    }
)


@FUZZ
@given(st.one_of(texts([REPORT, "[" * 50 + "]" * 50]), st.binary(max_size=300)))
def test_gate_reports(raw):
    """Every message gets an outcome, never an exception, with keys or without."""
    import logging

    from vllm_guardian.config.schema import TrustConfig
    from vllm_guardian.gates.intake import OUTCOMES
    from vllm_guardian.gates.shared import GatesShared
    from vllm_guardian.gates.trust import KeyRing, Keys

    for keys in (None, KeyRing.fixed(Keys({"gw": b"0123456789abcdef0123"}, "gw"))):
        shared = GatesShared("node-a", 60.0, logging.getLogger("fuzz"), TrustConfig(), keys, started=1767225600.0)
        shared.known_targets = frozenset({"t"})
        assert shared.accept_report(raw, 1.0, 1767225600.0) in OUTCOMES


# ---------------------------------------------------------------- config
@FUZZ
@given(texts([CONFIG, "interval: 1\nalerts: {redis_url: embedded}\n", "a: &a [1]\nb: *a\n"]))
def test_config_text(text):
    try:
        parse_config(load_yaml(text, "g.yaml"))
    except ConfigError:
        pass


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
_KEYS = st.sampled_from(
    [
        "interval",
        "state_dir",
        "targets",
        "alerts",
        "policy",
        "probes",
        "detectors",
        "name",
        "match",
        "port",
        "restart",
        "mode",
        "timeout",
        "spool",
        "max_events",
        "x",
    ]
)
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=25,
)


@FUZZ
@given(st.dictionaries(_KEYS, _DATA, max_size=6))
def test_config_data(data):
    try:
        parse_config(data)
    except ConfigError:
        pass


# ---------------------------------------------------------------- diagnosis catalogs (an operator's file)
CATALOG = (Path(__file__).parents[2] / "vllm_guardian" / "diagnosis" / "catalog" / "vllm.yaml").read_text()
_CATALOG_KEYS = st.sampled_from(
    ["schema", "name", "version", "signatures", "id", "title", "kinds", "confidence", "source", "hot_thread",
     "threads", "frames", "function", "file", "within", "state", "logs", "regex", "metrics", "op", "value",
     "exception", "type", "versions", "min", "fixed_in", "role", "workaround_apply", "args", "env", "x"]
)  # fmt: skip
_CATALOG_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_CATALOG_KEYS, inner, max_size=5)),
    max_leaves=30,
)


@FUZZ
@given(texts([CATALOG, "schema: 1\nname: n\nversion: '1'\nsignatures: [{id: x}]\n", "a: &a [1]\nb: *a\n"]))
def test_catalog_text(text):
    try:
        parse_catalog(yaml.safe_load(text), "extra.yaml")
    except (CatalogError, yaml.YAMLError):
        pass


@FUZZ
@given(st.dictionaries(_CATALOG_KEYS, _CATALOG_DATA, max_size=6))
def test_catalog_data(data):
    try:
        parse_catalog({"schema": 1, "name": "n", "version": "1", **data}, "extra.yaml")
    except CatalogError:
        pass


# ---------------------------------------------------------------- control socket
@pytest.fixture(scope="module")
def control(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sock") / "g.sock")
    api = ControlSocket(path, {"ping": lambda req: "pong", "status": lambda req: {"targets": []}}, read_timeout=1.0)
    api.start()
    yield path
    api.stop()


def _exchange(path: str, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while not out.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out


_MESSAGES = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda d: json.dumps(d).encode() + b"\n",
        st.dictionaries(st.sampled_from(["cmd", "target", "x"]), _SCALARS, max_size=3),
    ),
    st.builds(lambda c: json.dumps({"cmd": c}).encode() + b"\n", st.text(max_size=10)),
)


@FUZZ
@given(_MESSAGES)
def test_control_socket_messages(control, payload):
    reply = json.loads(_exchange(control, payload.replace(b"\n", b" ") + b"\n"))
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)

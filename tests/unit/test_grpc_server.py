"""A --grpc server (no /health, no /metrics, no HTTP canary): ready by its socket, a busy loop judged from /proc."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.detector_world import ENGINE, NOW, T, make_view, seconds
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import busy_loop
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Sample, Subject, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.state.tracker import Tracker

CFG = DetectorsConfig()
SPIN = Subject(ENGINE.key.pid, ENGINE.key.pid).key
PROC = Subject(ENGINE.key.pid).key


def spinning(thread_syscalls_move: bool, process_syscalls_move: bool) -> list[Sample]:
    """The engine's main thread burning a core for 20 s, its syscall counters sampled each second."""
    out = []
    for i, t in enumerate(seconds(NOW - 20, NOW)):
        out += [
            Sample(T, SPIN, m.THREAD_CPU, 1.0, t),
            Sample(T, SPIN, m.THREAD_VOL_RATE, 0.0, t),
            Sample(T, SPIN, m.THREAD_RUNNING, 1.0, t),
            Sample(T, SPIN, m.THREAD_SYSCALLS, 500.0 + (i if thread_syscalls_move else 0), t),
            Sample(T, PROC, m.PROC_SYSCALLS, 9000.0 + (3 * i if process_syscalls_move else 0), t),
        ]
    return out


def grpc_view(*series, grpc: bool = True):
    v = make_view(*series)
    return replace(v, state=replace(v.state, grpc=grpc))


@pytest.mark.parametrize(
    "thread_moves, process_moves, accel_util, grpc, caught",
    [
        (False, False, None, True, True),
        (True, False, None, True, False),  # the thread itself still reads or writes
        (False, True, None, True, False),  # another thread of the engine still hands out steps
        (False, False, 0.9, True, False),  # its accelerator works: no verdict from syscalls alone
        (False, False, 0.0, True, True),  # an idle accelerator does not excuse it
        (False, False, None, False, False),  # an HTTP server: judged by its counters and canary instead
    ],
    ids=["frozen", "thread-moves", "process-moves", "accelerator-busy", "accelerator-idle", "not-grpc"],
)
def test_a_grpc_servers_spin_is_judged_by_its_frozen_syscalls(thread_moves, process_moves, accel_util, grpc, caught):
    series = [spinning(thread_moves, process_moves)]
    if accel_util is not None:
        series.append([Sample(T, "", m.ACCEL_UTIL, accel_util, t) for t in seconds(NOW - 20, NOW)])
    f = busy_loop.evaluate(grpc_view(*series, grpc=grpc), CFG)
    confirmed = f is not None and f.confirmed and f.signals.get("reason") == "syscalls_frozen"
    assert confirmed is caught
    if f is not None and caught:
        assert f.signals["grpc"] is True and "judged from /proc" in f.summary


API = ProcKey(100, 11)


def tracker(*argv: str, verified: str = "owned") -> Tracker:
    tr = Tracker(60)
    api = ProcessInfo(API, 1, Role.API_SERVER, argv)
    engine = ProcessInfo(ProcKey(200, 22), 100, Role.ENGINE_CORE, ("VLLM::EngineCore",))
    tr.apply_discovery((Target("t", API, (api, engine), 8000, "http://127.0.0.1:8000", socket=verified),), (), 5)
    return tr


def test_a_grpc_server_is_ready_once_its_socket_is_seen_and_an_http_one_is_not():
    assert tracker("vllm", "serve", "m", "--grpc").state("t", 6).ready
    assert not tracker("vllm", "serve", "m").state("t", 6).ready  # waits for /health + /v1/models
    assert not tracker("vllm", "serve", "m", "--grpc", verified="argv").state("t", 6).ready  # port not seen
    assert not tracker("vllm", "serve", "m", "--grpc", verified="starting").state("t", 6).ready  # not listening

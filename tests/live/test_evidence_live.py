"""Evidence against real processes with the real py-spy (we run as root, so ptrace works):
the simulated vLLM server spinning or stalled, and a plain child that exits mid-capture."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import threading
import time

import pytest

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.evidence import EvidenceCollector, EvidenceContext, read_summary
from vllm_guardian.bundle.pid_target import target_for_pid
from vllm_guardian.clock import SystemClock
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.incidents.store import IncidentStore
from vllm_guardian.model import Incident, Kind, ProcessInfo, Role, Severity, Status, Target, TargetRef
from vllm_guardian.sim.control import SimServer
from tests.support.wait import wait_for

pytestmark = pytest.mark.live

FUTEX = {"x86_64": "202", "aarch64": "98"}


def thread_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def cpu_ticks(pid: int) -> int:
    f = thread_fields(pid)
    return int(f[11]) + int(f[12])


def syscall_nr(pid: int) -> str:
    with open(f"/proc/{pid}/task/{pid}/syscall") as fh:
        return fh.read().split()[0]


def send_in_background(server: SimServer) -> None:
    def call():
        try:
            server.complete(timeout=60)
        except Exception:  # noqa: BLE001 - the server is torn down under it
            pass

    threading.Thread(target=call, daemon=True).start()


def incident(kind: Kind, target: Target, pid: int) -> Incident:
    now = time.time()
    return Incident(
        new_incident_id(now),
        kind,
        Severity.CRITICAL,
        "live",
        TargetRef(target.name, target.key.pid, target.key.starttime, None, None, "engine_core"),
        Status.FIRING,
        f"{kind.value} in {pid}",
        now,
        {"pid": pid, "tid": pid},
    )


def collector(tmp_path, runner=None, **cfg) -> tuple[EvidenceCollector, IncidentStore]:
    store = IncidentStore(tmp_path / "state")
    c = EvidenceCollector(EvidenceConfig(**cfg), store.dir_for, runner or SubprocessRunner(), ProcFS(), SystemClock())
    return c, store


@pytest.fixture
def server():
    servers: list[SimServer] = []

    def make() -> SimServer:
        s = SimServer(startup_delay=0.3).start()
        servers.append(s)
        s.wait_ready(20)
        return s

    yield make
    for s in servers:
        s.stop(timeout=2)


def test_busy_loop_bundle_names_the_spinning_frame_and_has_a_flame_graph(server, tmp_path):
    sim = server()
    engine = sim.engine_pid()
    sim.set_fault("busy_loop")
    send_in_background(sim)
    start = cpu_ticks(engine)
    wait_for(lambda: cpu_ticks(engine) >= start + 20, what="the engine main thread spinning")
    target = target_for_pid(ProcFS(), sim.pid)
    assert {p.role for p in target.processes} >= {Role.API_SERVER, Role.ENGINE_CORE}
    c, _ = collector(tmp_path, record_seconds=2)

    t0 = time.monotonic()
    res = c.capture(EvidenceContext(incident(Kind.BUSY_LOOP, target, engine), target))
    took = time.monotonic() - t0
    print(
        f"\nbusy_loop bundle: {len(res.files)} files, {len(target.processes)} processes, "
        f"record 2 s, capture {took:.2f} s (result.duration {res.duration:.2f} s)"
    )

    threads = pyspy.parse_dump_json((res.dir / f"pyspy-{engine}-engine_core.json").read_text())
    main = next(t for t in threads if t.os_thread_id == engine)
    assert main.frames[0].name == "_ghost_key_spin"
    assert main.active and main.owns_gil
    svg = (res.dir / f"flame-{engine}.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "_ghost_key_spin" in svg
    speedscope = json.loads((res.dir / f"flame-{engine}.speedscope.json").read_text())
    assert speedscope["profiles"]
    assert "_ghost_key_spin" in read_summary(res.dir)
    assert res.complete, res.failures
    assert took < 2 + 8  # record and dumps overlap: ~record_seconds, not their sum


def test_stall_bundle_shows_the_lock_wait_and_the_futex_in_proc(server, tmp_path):
    sim = server()
    engine = sim.engine_pid()
    sim.set_fault("stall")
    send_in_background(sim)
    futex = FUTEX[platform.machine()]
    wait_for(
        lambda: thread_fields(engine)[0] == "S" and syscall_nr(engine) == futex,
        what="the engine main thread in a futex wait",
    )
    target = target_for_pid(ProcFS(), sim.pid)
    c, _ = collector(tmp_path, record_seconds=0)

    t0 = time.monotonic()
    res = c.capture(EvidenceContext(incident(Kind.ENGINE_STALL, target, engine), target))
    print(
        f"\nstall bundle: {len(res.files)} files, {len(target.processes)} processes, no record, "
        f"capture {time.monotonic() - t0:.2f} s"
    )

    threads = pyspy.parse_dump_json((res.dir / f"pyspy-{engine}-engine_core.json").read_text())
    main = next(t for t in threads if t.os_thread_id == engine)
    assert main.frames[0].name == "_wait_on_lock" and not main.owns_gil
    syscall = (res.dir / "proc" / str(engine) / "task" / str(engine) / "syscall").read_text()
    assert syscall.split()[0] == futex
    assert "_wait_on_lock" in read_summary(res.dir)


class KillBeforeDump:
    """The real runner, except that the victim exits (and is reaped) just before py-spy reaches it."""

    def __init__(self, victim: subprocess.Popen) -> None:
        self.victim = victim
        self.inner = SubprocessRunner()

    def run(self, argv, timeout, **kw):
        if "--pid" in argv and argv[argv.index("--pid") + 1] == str(self.victim.pid) and self.victim.poll() is None:
            self.victim.kill()
            self.victim.wait(10)
        return self.inner.run(argv, timeout, **kw)


def test_a_child_that_exits_during_capture_leaves_a_partial_bundle_with_the_reason(tmp_path):
    code = "import time\nwhile True:\n    time.sleep(0.05)\n"
    keeper = subprocess.Popen([sys.executable, "-c", code])
    leaver = subprocess.Popen([sys.executable, "-c", code])
    try:
        procfs = ProcFS()
        wait_for(
            lambda: all(procfs.cmdline(p.pid)[:1] == (sys.executable,) for p in (keeper, leaver)),
            what="both children exec'd",
        )
        procs = tuple(
            ProcessInfo(procfs.identity(p.pid), 1, Role.OTHER, (sys.executable, "-c", "…")) for p in (keeper, leaver)
        )
        target = Target("plain", procs[0].key, procs)
        c, _ = collector(tmp_path, runner=KillBeforeDump(leaver), record_seconds=0)
        t0 = time.monotonic()
        res = c.snapshot(target)
        print(f"\npartial bundle: capture {time.monotonic() - t0:.2f} s, failures {sorted(res.failures)}")
    finally:
        for p in (keeper, leaver):
            p.kill()
            p.wait(10)
    assert not res.complete
    assert res.failures[f"pyspy-{leaver.pid}-other.json"].startswith("process gone")
    assert f"pyspy-{keeper.pid}-other.json" in res.files
    assert f"proc/{leaver.pid}/task/{leaver.pid}/stat" in res.files  # read before the process left
    manifest = json.loads((res.dir / "capture.json").read_text())
    assert manifest["failures"][f"pyspy-{leaver.pid}-other.json"].startswith("process gone")

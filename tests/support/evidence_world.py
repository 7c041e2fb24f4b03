"""Evidence capture against a fake /proc with one vLLM tree (API server 100, EngineCore 200, worker
300), a busy-loop incident on its EngineCore and a scripted py-spy (``dump_json``, ``records_write``)."""

from __future__ import annotations

import json
from pathlib import Path


from vllm_guardian.bundle.evidence import (
    EvidenceCollector,
    EvidenceContext,
)
from vllm_guardian.config.schema import EvidenceConfig
from vllm_guardian.incidents.ids import new_incident_id
from vllm_guardian.incidents.store import IncidentStore
from vllm_guardian.model import Incident, Kind, ProcessInfo, Role, Severity, Status, Target, TargetRef
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner, result


SECRET = "sk-live-0123456789"


API_ARGV = ("python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000", "--api-key", SECRET)


def dump_json(pid: int, frames: list[str], tid: int | None = None, idle_tid: int | None = None) -> str:
    threads = [
        {
            "pid": pid,
            "thread_id": 1000 + pid,
            "thread_name": "MainThread",
            "os_thread_id": tid or pid,
            "active": True,
            "owns_gil": True,
            "frames": [
                {
                    "name": f,
                    "filename": f"/srv/{pid}.py",
                    "module": None,
                    "short_filename": f"{pid}.py",
                    "line": i + 1,
                    "locals": None,
                    "is_entry": False,
                    "is_shim_entry": False,
                }
                for i, f in enumerate(frames)
            ],
            "process_info": None,
        }
    ]
    if idle_tid is not None:
        threads.append(
            {
                "pid": pid,
                "thread_id": 2000 + pid,
                "thread_name": "idle-one",
                "os_thread_id": idle_tid,
                "active": False,
                "owns_gil": False,
                "frames": [],
                "process_info": None,
            }
        )
    return json.dumps(threads)


def records_write(content: bytes = b"<svg>flame</svg>"):
    """A scripted ``py-spy record``: writes its --output like the real one."""

    def answer(argv):
        Path(argv[argv.index("--output") + 1]).write_bytes(content)
        return result("py-spy> Wrote flamegraph data\n")

    return answer


class World:
    """A fake /proc with one vLLM tree, an incident on its EngineCore, and a scripted py-spy."""

    def __init__(self, tmp: Path, **cfg):
        self.tree = FakeProcTree(tmp / "proc")
        self.api = self.tree.add_process(100, cmdline=API_ARGV, threads=[101])
        self.engine = self.tree.add_process(
            200, ppid=100, cmdline=("VLLM::EngineCore",), state="R", utime=900, threads=[201]
        )
        self.tree.set_thread(200, 200, voluntary=3, nonvoluntary=4567)
        self.worker = self.tree.add_process(300, ppid=200, cmdline=("VLLM::Worker",))
        self.target = Target(
            "llama",
            self.api,
            (
                ProcessInfo(self.api, 1, Role.API_SERVER, API_ARGV),
                ProcessInfo(self.engine, 100, Role.ENGINE_CORE, ("VLLM::EngineCore",)),
                ProcessInfo(self.worker, 200, Role.WORKER, ("VLLM::Worker",)),
            ),
            port=8000,
        )
        self.clock = FakeClock()
        self.store = IncidentStore(tmp / "state")
        self.incident = Incident(
            id=new_incident_id(self.clock.wall()),
            kind=Kind.BUSY_LOOP,
            severity=Severity.CRITICAL,
            node="n1",
            target=TargetRef("llama", 100, self.api.starttime, 8000, "m", "engine_core"),
            status=Status.FIRING,
            summary="EngineCore thread 200 spins at 99% CPU with no engine progress",
            opened_at=self.clock.wall(),
            signals={"pid": 200, "tid": 200, "cpu_ratio": 0.99, "voluntary_per_cpu_s": 0.0},
        )
        self.runner = FakeRunner(
            {
                ("py-spy", "dump", "--pid", "100"): result(dump_json(100, ["serve_forever", "main"], idle_tid=101)),
                ("py-spy", "dump", "--pid", "200"): result(
                    dump_json(200, ["_ghost_key_spin", "_fire", "step"], idle_tid=201)
                ),
                ("py-spy", "dump", "--pid", "300"): result(dump_json(300, ["recv", "worker_main"])),
                ("py-spy", "record"): records_write(),
            }
        )
        defaults = {"record_seconds": 2.0, "dump_timeout": 5.0}
        self.cfg = EvidenceConfig(**{**defaults, **cfg})

    def collector(self, runner=None, **kw) -> EvidenceCollector:
        kw.setdefault("locate", lambda name: name)
        return EvidenceCollector(
            self.cfg, self.store.dir_for, runner or self.runner, self.tree.procfs(), self.clock, **kw
        )

    def context(self, **kw) -> EvidenceContext:
        kw.setdefault("incident", self.incident)
        kw.setdefault("target", self.target)
        return EvidenceContext(**kw)

    def capture(self, runner=None, **ctx):
        return self.collector(runner).capture(self.context(**ctx))

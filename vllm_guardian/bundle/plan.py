"""What one capture will do, decided before anything is read (``EvidenceCollector``'s first step)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.model import ProcessInfo

RECORDS = (("flamegraph", "svg"), ("speedscope", "speedscope.json"))  # py-spy record formats, file suffixes


@dataclass(frozen=True)
class CapturePlan:
    bundle_id: str
    wall: float  # when the capture started (wall clock)
    start: float  # when the capture started (the clock seam's monotonic time)
    alive: tuple[ProcessInfo, ...]  # the snapshotted processes still themselves
    answers: bool  # a kind explained by the answers (``gates.json``), not by stacks
    exe: str | None  # py-spy's argv[0]; None: no stacks
    hottest: int | None  # the process chosen for the flame records
    seconds: float  # how long to record
    recorded: int | None  # the pid recorded; None: no record
    gentle: bool  # --nonblocking dumps only (the server is still serving)
    deadline: float  # seconds the whole capture may take
    until: float  # time.monotonic() at which it ends

    def captured(self, p: ProcessInfo) -> bool:
        return p in self.alive

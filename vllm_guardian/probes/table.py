"""The probes of the tick loop, in the order they run: one line per probe.

Each entry is ``(name, make)``: ``make(parts)`` builds the probe from the built parts
(``ProbeParts``), or returns None when there is nothing to probe on this node (no accelerator
backend). The name is the config key under ``probes:``, the ``probe`` label of the guardian's
own metrics and the key of its counters in ``guardian status``; it is listed even when the
probe is off, so the counters are always there. Discovery is not in the table: it is the
loop's first stage, it decides what the probes look at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vllm_guardian.probes.accel import AccelProbe
from vllm_guardian.probes.base import Probe, ProbeParts
from vllm_guardian.probes import gates
from vllm_guardian.probes.canary import CanaryProbe
from vllm_guardian.probes.procfs import ProcfsProbe
from vllm_guardian.probes import server_state, vllm_state
from vllm_guardian.probes.vllm_http import VllmHttpProbe

ProbeRow = tuple[str, Callable[[ProbeParts], "Probe | None"]]

PROBE_TABLE: tuple[ProbeRow, ...] = (
    ("procfs", ProcfsProbe),
    ("vllm_http", VllmHttpProbe),
    ("canary", CanaryProbe),
    ("server_state", server_state.make),
    ("vllm_state", vllm_state.make),
    ("accel", lambda parts: AccelProbe(parts) if parts.seams.accel_backends else None),
    ("gates", gates.make),
)


def probe_names(table: Sequence[ProbeRow] | None = None) -> tuple[str, ...]:
    return tuple(name for name, _ in (PROBE_TABLE if table is None else table))


def build_probes(parts: ProbeParts, table: Sequence[ProbeRow] | None = None) -> list[Probe]:
    """The probes of ``table`` (default: ``PROBE_TABLE``) that have something to probe, in order."""
    probes = [make(parts) for _, make in (PROBE_TABLE if table is None else table)]
    return [p for p in probes if p is not None]

"""The extension tables a daemon is assembled from: probes, incident kinds, restart methods.

Each is the package's own table by default (``probes/table.py``, ``detectors/kinds.py``,
``remediation/methods``); adding a probe, a detector or a restart method is one file and one row
of its table. The assembler (``loop/assemble.py``) hands each table to the parts that read it, so
a daemon assembled from extended tables (``tests/component/test_extension_points.py``) runs the
new row with no change to the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllm_guardian.detectors import kinds as kind_table
from vllm_guardian.detectors.kinds import Detector, KindSpec
from vllm_guardian.model import Kind
from vllm_guardian.probes import table as probe_table
from vllm_guardian.probes.table import ProbeRow
from vllm_guardian.remediation import methods as method_table
from vllm_guardian.remediation.methods import MethodRow


def _probes() -> Sequence[ProbeRow]:
    return probe_table.PROBE_TABLE  # read when a daemon is assembled, not when this is imported


def _kinds() -> Mapping[Kind, KindSpec]:
    return kind_table.KINDS


def _methods() -> Sequence[MethodRow]:
    return method_table.METHODS


@dataclass(frozen=True)
class Tables:
    probes: Sequence[ProbeRow] = field(default_factory=_probes)  # (name, make(parts)), in the order they run
    kinds: Mapping[Kind, KindSpec] = field(default_factory=_kinds)  # one row per incident kind
    methods: Sequence[MethodRow] = field(default_factory=_methods)  # (restart.mode, make(unit_for))

    def detectors(self) -> dict[Kind, Detector]:
        """The per-target detectors of the kind rows, in table order."""
        return {kind: row.evaluate for kind, row in self.kinds.items() if row.evaluate is not None}

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

from vllm_guardian.detectors.kinds import KINDS, Detector, KindSpec
from vllm_guardian.model import Kind
from vllm_guardian.probes.table import PROBE_TABLE, ProbeRow
from vllm_guardian.remediation.methods import METHODS, MethodRow


@dataclass(frozen=True)
class Tables:
    probes: Sequence[ProbeRow] = PROBE_TABLE  # (name, make(parts)), in the order they run
    kinds: Mapping[Kind, KindSpec] = field(default_factory=lambda: KINDS)  # one row per incident kind
    methods: Sequence[MethodRow] = METHODS  # (restart.mode, make(unit_for))

    def detectors(self) -> dict[Kind, Detector]:
        """The per-target detectors of the kind rows, in table order."""
        return {kind: row.evaluate for kind, row in self.kinds.items() if row.evaluate is not None}


DEFAULT_TABLES = Tables()

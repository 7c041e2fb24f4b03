"""The device-fault catalog: what an accelerator fault code means and what to do about it.

Reads the YAML files shipped in ``vllm_guardian/detectors/device_faults/`` (schema 1)::

    schema: 1
    name: nvidia-device-faults
    version: "2026.12.1"
    faults:
      - code: "xid:79"             # xid:<n> | an NVML event kind | a condition code | <prefix>:*
        title: "GPU has fallen off the bus"
        meaning: "..."             # what the source says the code means
        severity: critical         # critical | warning | info
        restart_can_help: false    # does restarting the application on the device help?
        action: reboot_node        # restart_app | reset_gpu | reboot_node | drain_node | replace | watch
        what_to_do: "..."
        source: "..."              # where the meaning comes from

Validated like the known-bug catalog: every problem of every file is listed at once in one
``CatalogError`` (a missing or unknown field, a wrong type, a duplicate code), nothing is
half-loaded. ``lookup(code)`` answers with the entry, else the ``<prefix>:*`` entry of its
family, else a generic unknown entry (never None: an unknown code is shown, never dropped).

``blocks_restart`` is the rule the remediation reads: a critical fault that a restart cannot
help. Warnings (throttling, a pending remap) annotate and never block. A configured rule
(``policy/fault_rules.py``, applied by the ledger) sets ``rule`` and then decides it instead.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Mapping

import yaml

from vllm_guardian.errors import CatalogError

SEVERITIES = ("critical", "warning", "info")
ACTIONS = ("restart_app", "reset_gpu", "reboot_node", "drain_node", "replace", "watch")
FIELDS = ("code", "title", "meaning", "severity", "restart_can_help", "action", "what_to_do", "source")
RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class FaultEntry:
    code: str
    title: str
    meaning: str
    severity: str
    restart_can_help: bool
    action: str
    what_to_do: str
    source: str
    rule: str = ""  # the action a ``policy.device_fault_rules`` rule set for it; "" for the catalog's

    @property
    def blocks_restart(self) -> bool:
        if self.rule:
            return self.rule in ("refuse_restart", "taint")
        return self.severity == "critical" and not self.restart_can_help

    @property
    def rank(self) -> int:
        return RANK[self.severity]

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), blocks_restart=self.blocks_restart)


UNKNOWN = FaultEntry(
    "*", "unknown device fault", "a code no catalog lists", "warning", True, "watch", "look the code up", "-"
)


class DeviceCatalog:
    def __init__(self, entries: Mapping[str, FaultEntry]) -> None:
        self.entries = dict(entries)

    def lookup(self, code: str) -> FaultEntry:
        if code in self.entries:
            return self.entries[code]
        prefix = code.split(":", 1)[0]
        family = self.entries.get(f"{prefix}:*")
        return family if family is not None else UNKNOWN


def parse_catalog(doc: Any, where: str) -> dict[str, FaultEntry]:
    """One YAML document -> its entries; ``CatalogError`` listing every problem."""
    problems: list[str] = []
    if not isinstance(doc, Mapping):
        raise CatalogError(f"{where}: a mapping with schema, name, version, faults is required")
    if doc.get("schema") != 1:
        problems.append(f"{where}: schema must be 1 (got {doc.get('schema')!r})")
    faults = doc.get("faults")
    if not isinstance(faults, list) or not faults:
        problems.append(f"{where}: faults must be a non-empty list")
        faults = []
    out: dict[str, FaultEntry] = {}
    for n, raw in enumerate(faults):
        at = f"{where}: faults[{n}]"
        if not isinstance(raw, Mapping):
            problems.append(f"{at}: must be a mapping")
            continue
        unknown = sorted(set(raw) - set(FIELDS))
        missing = [f for f in FIELDS if f not in raw]
        if unknown:
            problems.append(f"{at}: unknown field(s) {', '.join(unknown)}")
        if missing:
            problems.append(f"{at}: missing field(s) {', '.join(missing)}")
            continue
        bad = [f for f in FIELDS if f != "restart_can_help" and not (isinstance(raw[f], str) and raw[f].strip())]
        if bad:
            problems.append(f"{at}: {', '.join(bad)} must be non-empty text")
        if not isinstance(raw["restart_can_help"], bool):
            problems.append(f"{at}: restart_can_help must be true or false")
        if raw["severity"] not in SEVERITIES:
            problems.append(f"{at}: severity must be one of {', '.join(SEVERITIES)} (got {raw['severity']!r})")
        if raw["action"] not in ACTIONS:
            problems.append(f"{at}: action must be one of {', '.join(ACTIONS)} (got {raw['action']!r})")
        code = str(raw["code"])
        if code in out:
            problems.append(f"{at}: duplicate code {code!r}")
        if bad or not isinstance(raw["restart_can_help"], bool) or raw["severity"] not in SEVERITIES:
            continue
        out[code] = FaultEntry(**{f: raw[f] for f in FIELDS})
    if problems:
        raise CatalogError("\n".join(problems))
    return out


def load_text(text: str, where: str) -> dict[str, FaultEntry]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CatalogError(f"{where}: not valid YAML: {e}") from None
    return parse_catalog(doc, where)


@functools.lru_cache(maxsize=1)
def shipped() -> DeviceCatalog:
    """Every file of the shipped catalog (one ``CatalogError`` for all their problems)."""
    root = resources.files(__package__).joinpath("device_faults")
    entries: dict[str, FaultEntry] = {}
    problems: list[str] = []
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if not item.name.endswith((".yaml", ".yml")):
            continue
        try:
            found = load_text(item.read_text(encoding="utf-8"), f"device_faults/{item.name}")
        except CatalogError as e:
            problems.append(str(e))
            continue
        dup = sorted(set(found) & set(entries))
        if dup:
            problems.append(f"device_faults/{item.name}: code(s) also in another file: {', '.join(dup)}")
        entries.update(found)
    if problems:
        raise CatalogError("\n".join(problems))
    return DeviceCatalog(entries)

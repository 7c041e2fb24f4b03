"""Incidents: ids, the on-disk store and the state machine (hysteresis, dedupe, lifecycle)."""

from __future__ import annotations

from vllm_guardian.incidents.ids import IdGenerator, new_incident_id
from vllm_guardian.incidents.manager import IncidentManager
from vllm_guardian.incidents.store import IncidentStore, incident_from_dict, incident_to_dict

__all__ = [
    "IdGenerator",
    "IncidentManager",
    "IncidentStore",
    "incident_from_dict",
    "incident_to_dict",
    "new_incident_id",
]

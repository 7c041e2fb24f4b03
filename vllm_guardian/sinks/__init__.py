"""Sinks: where incident events go — alert events (schema v1), the local spool, Redis
(streams + pub/sub, exactly once per event id), the embedded Redis and the fleet view.

Importing this package starts nothing; redis-py is imported inside the functions that use it.
"""

from __future__ import annotations

from vllm_guardian.sinks.embedded_redis import EmbeddedRedis, find_redis_server
from vllm_guardian.sinks.events import (
    SCHEMA_VERSION,
    AlertEmitter,
    IncidentAlerts,
    event_from_incident,
    list_evidence_files,
)
from vllm_guardian.sinks.fleet import (
    NodeHeartbeat,
    ack,
    alerts_main,
    autoclaim,
    ensure_group,
    fleet_status,
    read_group,
    render_fleet,
    tail,
)
from vllm_guardian.sinks.redis_sink import AlertSink, AlertSinkSettings
from vllm_guardian.sinks.redis_client import make_client, mask_url, publish_control, resolve_password
from vllm_guardian.sinks.redis_delivery import RedisDelivery
from vllm_guardian.sinks.spool import Spool

__all__ = [
    "SCHEMA_VERSION",
    "AlertEmitter",
    "AlertSink",
    "AlertSinkSettings",
    "EmbeddedRedis",
    "NodeHeartbeat",
    "IncidentAlerts",
    "RedisDelivery",
    "Spool",
    "ack",
    "alerts_main",
    "autoclaim",
    "ensure_group",
    "event_from_incident",
    "find_redis_server",
    "fleet_status",
    "list_evidence_files",
    "make_client",
    "mask_url",
    "publish_control",
    "read_group",
    "render_fleet",
    "resolve_password",
    "tail",
]

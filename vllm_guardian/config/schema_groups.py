"""The ``groups`` section of the config: multi-node and data-parallel groups (docs/groups.md)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema_fields import INTERVAL, SECONDS, setting


@dataclass(frozen=True)
class GroupsConfig:
    """Multi-node and data-parallel groups (docs/groups.md): the signed group record each node
    publishes in the fleet Redis (needs ``gates.trust`` keys) and reads back."""

    enabled: bool = setting(True, doc="publish and read group records (a group target is found from its argv)")
    interval: float = setting(
        2.0, "positive", "seconds between publishing this node's records and reading others'", bound=INTERVAL
    )
    max_age: float = setting(15.0, "positive", "a record older than this is stale (not believed)")
    order_timeout: float = setting(
        120.0,
        "positive",
        "a headless member's restart waits this long for its leader's restart (group plan)",
        bound=SECONDS,
    )
    orphan_interval: float = setting(
        5.0, "positive", "seconds between looks for VLLM:: processes with no API server", bound=INTERVAL
    )
    orphan_min_rss: int = setting(64 * 1024 * 1024, "nonneg", "an orphan holds at least this RSS (or device memory)")
    stop_orphans: bool = setting(
        False,
        doc="SIGKILL orphans proven from a supervised tree (pid + start time); never title-only ones, never dry-run",
    )

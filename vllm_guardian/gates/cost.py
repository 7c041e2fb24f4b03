"""What the gates cost a server, from the config and a measured round time. Pure.

One round per target per ``interval``: one completion per diagnostic and per shadow
prompt, one for the reference text (two when the server needs the ``echo`` fallback),
plus ``GET /version`` and ``GET /v1/models`` (not counted: they never reach the engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema import GatesConfig


@dataclass(frozen=True)
class GateCost:
    rounds_per_hour: float
    requests_per_hour: float
    generated_tokens_per_hour: float
    server_seconds_per_hour: float  # the server busy with gate requests, one at a time
    share_of_capacity: float  # server_seconds_per_hour / 3600 (a server doing one request at a time)


def requests_per_round(cfg: GatesConfig) -> int:
    return len(cfg.diagnostics) + (len(cfg.shadow_prompts) if cfg.shadow else 0) + 1


def cost(cfg: GatesConfig, round_server_seconds: float) -> GateCost:
    """``round_server_seconds``: the server time one round's completions take, measured."""
    rounds = 3600.0 / cfg.interval
    tokens = (
        sum(d.max_tokens for d in cfg.diagnostics)
        + (cfg.shadow_max_tokens * len(cfg.shadow_prompts) if cfg.shadow else 0)
        + 1
    )
    busy = rounds * round_server_seconds
    return GateCost(rounds, rounds * requests_per_round(cfg), rounds * tokens, busy, busy / 3600.0)

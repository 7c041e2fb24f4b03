"""What the gates cost a server, from the config and a measured round time. Pure.

One round per target per ``interval``: one completion per diagnostic (the built-in
checks included) and per shadow prompt, one for the reference text (two when the
server needs the ``echo`` fallback), plus ``GET /version`` and ``GET /v1/models`` (not
counted: they never reach the engine). A failing round adds up to ``confirm_rounds``
quick rounds (``confirmations``): paid only while something fails or an external
report asks for a confirmation, never on a healthy server.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.config.schema_detectors import OutputCorruptionConfig
from vllm_guardian.gates.known_answers import diagnostics_of


@dataclass(frozen=True)
class GateCost:
    rounds_per_hour: float
    requests_per_hour: float
    generated_tokens_per_hour: float
    server_seconds_per_hour: float  # the server busy with gate requests, one at a time
    share_of_capacity: float  # server_seconds_per_hour / 3600 (a server doing one request at a time)
    confirmations_per_episode: int = 0  # quick rounds at most after one failing round
    confirmation_server_seconds: float = 0.0  # what they cost the server, at most, per failing episode


def requests_per_round(cfg: GatesConfig) -> int:
    return len(diagnostics_of(cfg)) + (len(cfg.shadow_prompts) if cfg.shadow else 0) + 1


def confirmations(cfg: GatesConfig, oc: OutputCorruptionConfig | None = None) -> int:
    """Quick rounds after a failing one: as configured, or enough for A, C and D to conclude."""
    if cfg.confirm_rounds is not None:
        return cfg.confirm_rounds
    oc = oc or OutputCorruptionConfig()
    return max(oc.l1_l2_failures, oc.l4_rounds, oc.l5_rounds) - 1


def cost(cfg: GatesConfig, round_server_seconds: float, oc: OutputCorruptionConfig | None = None) -> GateCost:
    """``round_server_seconds``: the server time one round's completions take, measured."""
    rounds = 3600.0 / cfg.interval
    tokens = (
        sum(d.max_tokens for d in diagnostics_of(cfg))
        + (cfg.shadow_max_tokens * len(cfg.shadow_prompts) if cfg.shadow else 0)
        + 1
    )
    busy = rounds * round_server_seconds
    n = confirmations(cfg, oc)
    return GateCost(
        rounds, rounds * requests_per_round(cfg), rounds * tokens, busy, busy / 3600.0, n, n * round_server_seconds
    )

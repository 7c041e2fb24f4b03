"""probe_failure: one of a target's probes keeps failing — the guardian is half blind.

Reads the target's open failure episodes (``EpisodeLog``: key ``<target>:<probe>``, how many
consecutive failures, the last message). Decides: a finding while some probe has failed at
least ``after`` times in a row — an ``auth`` episode (the server refused the guardian's API key,
or wants one it has none of) from its first failure: it is a configuration fault that never
heals by itself and blinds every hang confirmation; none once every episode closed. Alert only: a blind spot is
never a reason to restart anything.
"""

from __future__ import annotations

from typing import Mapping

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Severity

KIND = Kind.PROBE_FAILURE
IMMEDIATE = (":auth",)  # episodes alerted from their first failure


def evaluate_episodes(
    target: str, episodes: Mapping[str, tuple[int, str, float]], cfg: DetectorsConfig, now: float
) -> Finding | None:
    """``episodes``: ``{key: (consecutive failures, last message, since)}`` for this target."""
    after = cfg.probe_failure.after
    failing = {k: v for k, v in episodes.items() if v[0] >= (1 if k.endswith(IMMEDIATE) else after)}
    if not failing:
        return None
    key, (count, message, since) = max(failing.items(), key=lambda kv: kv[1][0])
    probe = key.split(":", 1)[1] if ":" in key else key
    return Finding(
        kind=KIND,
        target=target,
        severity=Severity.WARNING,
        summary=f"probe {probe} has failed {count} times in a row for {now - since:.0f}s: {message}",
        signals={
            "probe": probe,
            "consecutive_failures": count,
            "failing_for_s": round(now - since, 1),
            "last_error": message[:300],
            "threshold_after": after,
            "failing_probes": sorted(k.split(":", 1)[-1] for k in failing),
        },
    )

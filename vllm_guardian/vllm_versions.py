"""What a vLLM server of a given version offers a supervisor: one capability row per version range.

Read from each release's own Python source (the wheel's ``vllm/`` tree; the file each fact came from is
in the row's ``sources`` and in docs/vllm-versions.md). Pure: a version string in, a row out, and the
classifiers that turn vLLM's own state answers into the guardian's phases:

- ``checkpoint_phase``: ``GET /checkpoint/status`` (0.34, with ``--enable-sleep-mode``) → ``running`` /
  ``checkpointing`` (preparing, prepared, restoring) / ``checkpoint_failed``. The 503 it answers while
  running or preparing is vLLM's "not captured yet", never an unhealthy signal.
- ``fault_tolerance_phases``: ``GET [/v1]/fault_tolerance/status`` → per-engine ``recovering``
  (diagnosing / unhealthy: a round is in flight), ``engine_dead`` (DEAD) or ``running`` (healthy).
- ``is_retired_answer``: the elastic-EP middleware's 503 for a rank retired on purpose.
- ``is_watchdog_dump``: a ``VLLM_STACK_DUMP_for_<name>_<pid>.log`` file name (``--watchdog-config``).

``capabilities_for`` picks the row: a version newer than every known row gets the newest row and a
one-line notice; an unread version gets the oldest (proven) row and a notice; one older than the oldest
row gets the oldest row and a notice (the guardian was proven on 0.32).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from packaging.version import InvalidVersion, Version

# the metric families the guardian reads (probes/vllm_metrics_parse.WATCHED): unchanged 0.32 → 0.34
WATCHED_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:iteration_tokens_total_count",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
)
TITLES = ("VLLM::APIServer", "VLLM::EngineCore", "VLLM::Worker")
CHECKPOINT_STATES = ("running", "preparing", "prepared", "restoring", "failed")
FT_ENGINE_STATES = ("healthy", "dead", "unhealthy", "diagnosing")
ENGINE_RECOVERY_TIMEOUT_S = 120.0  # vllm/config/fault_tolerance.py: engine_recovery_timeout_sec = 120
RETIRED_ERROR = "This data-parallel rank has been retired and is awaiting shutdown."
_DUMP_NAME = re.compile(r"^VLLM_STACK_DUMP_for_(?P<name>.+)_(?P<pid>[0-9]{1,10})\.log$")

# phases the guardian gives vLLM's own states
RUNNING = "running"
CHECKPOINTING = "checkpointing"
CHECKPOINT_FAILED = "checkpoint_failed"
RECOVERING = "recovering"
ENGINE_DEAD = "engine_dead"
RETIRED = "retired"


@dataclass(frozen=True)
class Capabilities:
    """What one vLLM version range offers; a path is None where that version has no such endpoint."""

    since: str  # the first release of the range (inclusive)
    health_path: str
    metrics_path: str | None
    version_path: str
    checkpoint_status_path: str | None  # only with --enable-sleep-mode
    checkpoint_prepare_path: str | None  # POST ?mode=abort|wait|keep
    checkpoint_restore_path: str | None
    fault_tolerance_status_path: str | None  # only with --enable-fault-tolerance
    fault_tolerance_apply_path: str | None
    elastic_ep_retire: bool  # a retired rank keeps its API server, /health 200, other paths 503
    watchdog_dumps: bool  # --watchdog-config writes VLLM_STACK_DUMP_for_<name>_<pid>.log
    grpc_server: bool  # --grpc: grpc.health.v1, no /metrics
    flags: tuple[str, ...]
    metrics: tuple[str, ...] = WATCHED_METRICS
    titles: tuple[str, ...] = TITLES
    sources: tuple[str, ...] = ()


ROWS: tuple[Capabilities, ...] = (
    Capabilities(
        since="0.32.0",
        health_path="/health",
        metrics_path="/metrics",
        version_path="/version",
        checkpoint_status_path=None,
        checkpoint_prepare_path=None,
        checkpoint_restore_path=None,
        fault_tolerance_status_path="/fault_tolerance/status",
        fault_tolerance_apply_path="/fault_tolerance/apply",
        elastic_ep_retire=False,
        watchdog_dumps=False,
        grpc_server=True,
        flags=("--enable-sleep-mode", "--enable-fault-tolerance", "--grpc"),
        sources=(
            "vllm/entrypoints/serve/fault_tolerance/api_router.py",
            "vllm/entrypoints/launchers/grpc_server.py",
        ),
    ),
    Capabilities(
        since="0.33.0",
        health_path="/health",
        metrics_path="/metrics",
        version_path="/version",
        checkpoint_status_path=None,
        checkpoint_prepare_path=None,
        checkpoint_restore_path=None,
        fault_tolerance_status_path="/fault_tolerance/status",
        fault_tolerance_apply_path="/fault_tolerance/apply",
        elastic_ep_retire=True,
        watchdog_dumps=True,
        grpc_server=True,
        flags=("--enable-sleep-mode", "--enable-fault-tolerance", "--watchdog-config", "--grpc"),
        sources=(
            "vllm/entrypoints/serve/fault_tolerance/api_router.py",
            "vllm/entrypoints/serve/elastic_ep/middleware.py",
            "vllm/utils/watch_dog.py",
            "vllm/entrypoints/launchers/grpc_server.py",
        ),
    ),
    Capabilities(
        since="0.34.0",
        health_path="/health",
        metrics_path="/metrics",
        version_path="/version",
        checkpoint_status_path="/checkpoint/status",
        checkpoint_prepare_path="/checkpoint/prepare",
        checkpoint_restore_path="/checkpoint/restore",
        fault_tolerance_status_path="/v1/fault_tolerance/status",
        fault_tolerance_apply_path="/v1/fault_tolerance/apply",
        elastic_ep_retire=True,
        watchdog_dumps=True,
        grpc_server=True,
        flags=("--enable-sleep-mode", "--enable-fault-tolerance", "--watchdog-config", "--grpc"),
        sources=(
            "vllm/entrypoints/serve/checkpoint/api_router.py",
            "vllm/entrypoints/launchers/api_server/routers.py",
            "vllm/entrypoints/serve/fault_tolerance/api_router.py",
            "vllm/entrypoints/serve/elastic_ep/middleware.py",
            "vllm/utils/watch_dog.py",
            "vllm/entrypoints/launchers/grpc_server.py",
        ),
    ),
)


@dataclass(frozen=True)
class CapabilityMatch:
    """The row a server gets, the version it reported, and a one-line notice when the row is a guess."""

    row: Capabilities
    version: str | None
    notice: str | None = None


def _parse(text: str | None) -> Version | None:
    try:
        return Version((text or "").strip().removeprefix("v"))
    except InvalidVersion:
        return None


def capabilities_for(version: str | None, *, rows: tuple[Capabilities, ...] = ROWS) -> CapabilityMatch:
    """The row for ``version`` (a ``/version`` answer or the distribution's metadata), with a notice if guessed."""
    parsed = _parse(version)
    oldest, newest = rows[0], rows[-1]
    if parsed is None:
        return CapabilityMatch(oldest, version, f"vLLM version {version!r} not read: assuming {oldest.since}'s row")
    release = Version(parsed.base_version)  # 0.34.0rc1 and 0.34.0+cu128 are 0.34's row
    if release < Version(oldest.since):
        return CapabilityMatch(oldest, version, f"vLLM {version} is older than {oldest.since}: using its row")
    chosen = oldest
    for row in rows:
        if release >= Version(row.since):
            chosen = row
    newest_minor = Version(newest.since).release[:2]
    if chosen is newest and release.release[:2] > newest_minor:
        return CapabilityMatch(newest, version, f"vLLM {version} is newer than known: using {newest.since}'s row")
    return CapabilityMatch(chosen, version)


def checkpoint_phase(status_code: int, body: Mapping[str, object] | None) -> str | None:
    """The phase a ``/checkpoint/status`` answer means; None when the answer says nothing known.

    vLLM answers 200 prepared, 500 failed, 503 otherwise — the body's ``state`` decides, the code
    only confirms it (a 503 with ``running`` is a serving engine, not an unhealthy one).
    """
    state = body.get("state") if isinstance(body, Mapping) else None
    if not isinstance(state, str) or state not in CHECKPOINT_STATES:
        return None
    expected = {"prepared": 200, "failed": 500}.get(state, 503)
    if status_code != expected:
        return None
    if state == "running":
        return RUNNING
    if state == "failed":
        return CHECKPOINT_FAILED
    return CHECKPOINTING


def fault_tolerance_phases(body: object, *, max_engines: int = 1024) -> dict[int, str]:
    """Engine index → phase from a fault-tolerance status answer; malformed entries are left out.

    The answer is ``{"engines": [{"id": i, "status": "healthy|dead|unhealthy|diagnosing"}, ...]}``
    (vllm/v1/engine/core_client.py, vllm/v1/fault_tolerance/engine_core_sentinel.py).
    """
    engines = body.get("engines") if isinstance(body, Mapping) else None
    out: dict[int, str] = {}
    if not isinstance(engines, list):
        return out
    for entry in engines[:max_engines]:
        if not isinstance(entry, Mapping):
            continue
        idx, status = entry.get("id"), entry.get("status")
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0 or not isinstance(status, str):
            continue
        status = status.lower()
        if status == "healthy":
            out[idx] = RUNNING
        elif status == "dead":
            out[idx] = ENGINE_DEAD
        elif status in ("diagnosing", "unhealthy"):
            out[idx] = RECOVERING
    return out


def recovery_deadline(started_at: float, *, timeout_s: float = ENGINE_RECOVERY_TIMEOUT_S, grace_s: float) -> float:
    """When the guardian stops standing down for an engine in vLLM's own round and judges it."""
    return started_at + timeout_s + grace_s


def is_retired_answer(status_code: int, body: Mapping[str, object] | None) -> bool:
    """True for the elastic-EP middleware's 503 of a rank retired on purpose (not a scaling pause)."""
    return status_code == 503 and isinstance(body, Mapping) and body.get("error") == RETIRED_ERROR


def is_watchdog_dump(name: str) -> tuple[str, int] | None:
    """(thread name, pid) for a ``VLLM_STACK_DUMP_for_<name>_<pid>.log`` file name, else None."""
    m = _DUMP_NAME.match(name)
    if not m or "/" in name:
        return None
    return m.group("name"), int(m.group("pid"))


def drain_via_checkpoint(row: Capabilities, *, sleep_mode: bool) -> str | None:
    """The ``POST`` path that drains by vLLM's own checkpoint prepare, where the server offers it."""
    if row.checkpoint_prepare_path is None or not sleep_mode:
        return None
    return f"{row.checkpoint_prepare_path}?mode=wait"


def visibility(row: Capabilities, *, grpc: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the guardian can see, what it cannot) for a server of this row; ``grpc`` for a --grpc server."""
    if grpc and row.grpc_server:
        return (
            ("/proc (threads, CPU, state)", "accelerator telemetry", "grpc.health.v1"),
            ("/metrics (a --grpc server has none)", "HTTP canary", "server_state (/is_paused, /is_sleeping)"),
        )
    seen = ["/proc (threads, CPU, state)", "accelerator telemetry", row.health_path, "/metrics", "HTTP canary"]
    if row.checkpoint_status_path:
        seen.append(row.checkpoint_status_path)
    if row.fault_tolerance_status_path:
        seen.append(row.fault_tolerance_status_path)
    return tuple(seen), ()

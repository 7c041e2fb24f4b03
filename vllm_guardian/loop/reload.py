"""A config reload (``SIGHUP``, ``systemctl reload``): the new config applied to the running
daemon in place, so nothing it knows is lost.

Reads the new ``Config`` (already loaded and validated by the caller: an invalid file never
gets here, the old config stays and the caller says why, with the key path). Decides, per
top-level section, what changed and applies it to the parts that read it: thresholds and modes
(``detectors``; open incidents and their streaks stay), probes (rebuilt; their readings, the
series and the tracker stay), ``discovery`` and ``targets`` (the next discovery pass uses them;
a configured target removed from the file is forgotten and its incidents resolve, unless a
restart of it is under way), ``policy`` and the restart specs (the restart ledger, backoff and
sequences in flight stay), ``lifecycle``. Sections wired into listeners, sockets and the state
directory at start-up (``NEEDS_RESTART``) are kept as they were and named in the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_guardian.config.schema import Config
from vllm_guardian.discovery.platform_match import platform_for
from vllm_guardian.model import Transition
from vllm_guardian.policy import fault_rules
from vllm_guardian.probes.base import Probe, ProbeParts
from vllm_guardian.probes.table import PROBE_TABLE, ProbeRow
from vllm_guardian.remediation.settings import RemediationSettings

if TYPE_CHECKING:
    from vllm_guardian.loop.daemon import Daemon

# Read once at start-up (listeners, the embedded Redis, backends, the state directory, the tick).
NEEDS_RESTART = ("node", "state_dir", "interval", "alerts", "api", "accelerators", "gates", "kubernetes")
KEPT_PROBES = ("accel", "gates")  # they hold backends / baselines built at start-up


@dataclass(frozen=True)
class ReloadResult:
    changed: tuple[str, ...]  # top-level sections that differ
    applied: tuple[str, ...]
    needs_restart: tuple[str, ...]  # changed, kept as they were until the guardian restarts
    targets_added: tuple[str, ...] = ()
    targets_removed: tuple[str, ...] = ()
    transitions: tuple[Transition, ...] = ()  # incidents resolved (a target removed)

    def summary(self) -> str:
        if not self.changed:
            return "config unchanged"
        parts = [f"applied {', '.join(self.applied) or 'nothing'}"]
        if self.targets_added:
            parts.append(f"targets added {', '.join(self.targets_added)}")
        if self.targets_removed:
            parts.append(f"targets removed {', '.join(self.targets_removed)}")
        if self.needs_restart:
            parts.append(f"kept until a restart: {', '.join(self.needs_restart)}")
        return "; ".join(parts)


def rebuilt_probes(current: list[Probe], parts: ProbeParts, table: Sequence[ProbeRow] = PROBE_TABLE) -> list[Probe]:
    """The probes of the table built from the new config, in table order; those holding what was
    built at start-up (``KEPT_PROBES``) are kept as they are (never built twice)."""
    kept = {p.name: p for p in current if p.name in KEPT_PROBES}
    out: list[Probe] = []
    for name, make in table:
        probe = kept.get(name) if name in KEPT_PROBES else make(parts)
        if probe is not None:
            out.append(probe)
    return out


def changed_sections(old: Config, new: Config) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Config) if getattr(old, f.name) != getattr(new, f.name))


def apply_config(daemon: Daemon, new: Config) -> ReloadResult:
    """Apply ``new`` to ``daemon`` (call it between ticks, or under the daemon's lock)."""
    old = daemon.cfg
    changed = changed_sections(old, new)
    needs_restart = tuple(c for c in changed if c in NEEDS_RESTART)
    cfg = dataclasses.replace(new, **{k: getattr(old, k) for k in NEEDS_RESTART})
    applied = tuple(c for c in changed if c not in NEEDS_RESTART)
    if not applied:
        return ReloadResult(changed, (), needs_restart)
    old_names = {t.name for t in old.targets}
    new_names = {t.name for t in cfg.targets}
    daemon.cfg = cfg
    daemon.incidents.reconfigure(cfg.detectors)
    if daemon.readings.device_faults is not None:
        rules = fault_rules.judge(cfg.policy.device_fault_rules, cfg.kubernetes.taint_on_device_fault)
        daemon.readings.device_faults.configure(rules)
    daemon.responder.reconfigure(cfg.detectors, {t.name: t for t in cfg.targets})
    tracker = daemon.tracker
    tracker.reconfigure(cfg)
    daemon.targets.reconfigure(cfg, platform_for(cfg, daemon.seams.proc, daemon.kube, daemon.seams.commands))
    parts = ProbeParts(cfg, daemon.seams, tracker, daemon.series, daemon.readings, daemon.log)
    daemon.probes.replace_probes(rebuilt_probes(daemon.probes.probes, parts, daemon.parts.tables.probes))
    rem = daemon.remediator
    rem.reconfigure(RemediationSettings.from_config(cfg))
    removed, transitions = [], []
    for name in sorted(old_names - new_names):
        tr = tracker.targets.get(name)
        if tr is None or tr.target.source != "config" or rem.active(name):
            continue  # not tracked as configured, or a restart of it is under way: it finishes first
        del tracker.targets[name]
        daemon.findings.pop(name, None)
        transitions.extend(daemon.incidents.resolve_target(name, "target removed from the config"))
        removed.append(name)
    return ReloadResult(
        changed,
        applied,
        needs_restart,
        tuple(sorted(new_names - old_names)),
        tuple(removed),
        tuple(transitions),
    )

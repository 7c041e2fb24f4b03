"""Applying a known bug's workaround on the restart after a recurrence (docs/policy.md, Workarounds).

``with_args`` builds the restart argv: the configured ``restart.command`` with the workaround's
flags set (a flag already there has its value replaced, never doubled). ``systemd_dropin`` renders
the unit drop-in for ``restart.mode: systemd`` (``Environment=`` lines; arguments through
``VLLM_GUARDIAN_EXTRA_ARGS``, which the unit's ExecStart must expand). Kubernetes is never patched:
``kube_patch`` is the proposed patch put in the alert. ``WorkaroundState`` records which targets run
with a workaround, in ``<state_dir>/workarounds.json``; ``guardian workaround clear <target>`` drops
the record, and the next restart uses the original command. Pure but for that file."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.diagnosis.workaround import Workaround, parse_workaround
from vllm_guardian.fsutil import atomic_write

log = logging.getLogger(__name__)
FILE = "workarounds.json"


def _split(args: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """``--flag value value --other`` → [(--flag, (value, value)), (--other, ())]."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append((a, ()))
        else:
            flag, values = out[-1]
            out[-1] = (flag, values + (a,))
    return out


def with_args(command: tuple[str, ...], workaround: Workaround) -> tuple[str, ...]:
    """``command`` with every flag of the workaround set to its values (replacing, not doubling)."""
    wanted = _split(workaround.args)
    flags = {f for f, _ in wanted}
    out: list[str] = []
    skip = False
    for a in command:
        if skip and not a.startswith("-"):
            continue
        skip = False
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    for flag, values in wanted:
        out.extend((flag, *values))
    return tuple(out)


def systemd_dropin(workaround: Workaround) -> str:
    """The drop-in for the unit (``<unit>.d/50-vllm-guardian-workaround.conf``)."""
    lines = ["# written by vllm-guardian (guardian workaround clear <target> removes it)", "[Service]"]
    lines += [f'Environment="{k}={v}"' for k, v in workaround.env]
    if workaround.args:
        lines.append(f'Environment="VLLM_GUARDIAN_EXTRA_ARGS={" ".join(workaround.args)}"')
    return "\n".join(lines) + "\n"


DROPIN = "50-vllm-guardian-workaround.conf"


def dropin_path(root: str, unit: str) -> Path:
    """``<root>/<unit>.d/50-vllm-guardian-workaround.conf`` (root: ``/run/systemd/system``, gone at boot)."""
    name = unit if "." in unit else f"{unit}.service"
    return Path(root) / f"{name}.d" / DROPIN


def sync_dropin(root: str, unit: str, workaround: Workaround | None) -> bool:
    """Write the unit's drop-in for ``workaround``, or remove it (None); True when the file changed
    (``systemctl daemon-reload`` is then needed before the restart)."""
    path = dropin_path(root, unit)
    if workaround is None:
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return False
    text = systemd_dropin(workaround)
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, OSError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
    return True


def kube_patch(container: str, workaround: Workaround) -> dict[str, Any]:
    """The patch an operator may apply to the pod's controller (never applied by the guardian)."""
    spec: dict[str, Any] = {"name": container}
    if workaround.args:
        spec["args"] = {"$append": list(workaround.args)}
    if workaround.env:
        spec["env"] = [{"name": k, "value": v} for k, v in workaround.env]
    return {"spec": {"template": {"spec": {"containers": [spec]}}}}


@dataclass(frozen=True)
class Applied:
    target: str
    signature: str
    workaround: Workaround
    incident: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "incident": self.incident,
            "at": self.at,
            **self.workaround.to_dict(),
        }


class WorkaroundState:
    """Which targets run with a workaround; an unreadable file counts as none (logged once)."""

    def __init__(self, state_dir: str) -> None:
        self.path = Path(state_dir) / FILE

    def load(self) -> dict[str, Applied]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.error("%s is unreadable (%s): no target counts as running with a workaround", self.path, e)
            return {}
        out: dict[str, Applied] = {}
        for target, rec in data.items() if isinstance(data, dict) else ():
            if not isinstance(rec, dict):
                continue
            wa, problems = parse_workaround({"args": rec.get("args") or [], "env": rec.get("env") or {}})
            if wa is None:
                log.error("%s: %s: ignored (%s)", self.path, target, "; ".join(problems))
                continue
            out[str(target)] = Applied(
                str(target), str(rec.get("signature", "")), wa, str(rec.get("incident", "")), float(rec.get("at", 0))
            )
        return out

    def record(self, applied: Applied) -> None:
        current = {k: v.to_dict() for k, v in self.load().items()}
        current[applied.target] = applied.to_dict()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(current, sort_keys=True))

    def clear(self, target: str) -> bool:
        current = self.load()
        if target not in current:
            return False
        del current[target]
        atomic_write(self.path, json.dumps({k: v.to_dict() for k, v in current.items()}, sort_keys=True))
        return True

    def command_for(self, target: str, command: tuple[str, ...]) -> tuple[str, ...]:
        """The argv to start: the original, or with the recorded workaround."""
        applied = self.load().get(target)
        return with_args(command, applied.workaround) if applied else command

    def restart_for(self, target: str, rc: RestartConfig) -> RestartConfig:
        """``restart`` for the next start: the command with the recorded workaround's flags and its
        environment over ``restart.env`` (unchanged when none is recorded)."""
        applied = self.load().get(target)
        if applied is None:
            return rc
        wa = applied.workaround
        return dataclasses.replace(rc, command=with_args(tuple(rc.command), wa), env={**rc.env, **dict(wa.env)})

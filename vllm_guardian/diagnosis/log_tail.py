"""Where a target's log lives, and a bounded read of its tail.

Sources, first that applies (``choose_source``, pure):
1. ``log_path`` of the target's config: a file the operator names;
2. ``restart.log_file`` (command mode: the server the guardian launched writes there);
3. ``journalctl -u UNIT`` for a systemd target (``restart.unit`` or ``match.systemd_unit``);
4. the previous container's log through the Kubernetes API (``match.kubernetes``
   pod, or the pod found by uid), ``previous=true``.

Reads (``read_tail``), each bounded to ``max_bytes`` (default 256 KiB) and the
runner's or API's timeout: a file from its end (the first, partial line dropped), opened as
``host.server_files`` opens a file on a server's behalf (a symbolic link the server's user could
change, a FIFO or device, or a hard link where others write is refused: a reason, counted
under its setting by ``ServerFiles``, never its text),
journalctl through the ``CommandRunner`` seam (``-n`` lines, ``-o cat``), the pod
log through ``KubeClient.read_log``. Never raises: a failure is a reason string.
Text is redacted (``redact_text``) before anyone keeps it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vllm_guardian.redact import redact_text
from vllm_guardian.config.schema import TargetConfig
from vllm_guardian.errors import BackendUnavailable, GuardianError
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.host.server_files import Opener, ServerFiles, UnsafePath, open_read
from vllm_guardian.host.server_files import read_tail as read_file_tail

MAX_BYTES = 256 * 1024
JOURNAL_LINES = 2000
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LogSource:
    kind: str  # file | journal | kubernetes
    where: str  # path, unit, or namespace/pod[/container]
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    pod_uid: str | None = None
    setting: str = ""  # file: the config key that names it (log_path, restart.log_file)

    def describe(self) -> str:
        return {"file": "file", "journal": "journalctl -u", "kubernetes": "previous container log of"}[
            self.kind
        ] + f" {self.where}"


@dataclass(frozen=True)
class LogTail:
    source: LogSource | None
    lines: tuple[str, ...]
    error: str | None = None
    truncated: bool = False  # the source held more than was read


def choose_source(target_cfg: TargetConfig | None) -> LogSource | None:
    """The log of a configured target, or None when nothing names one."""
    if target_cfg is None:
        return None
    restart, match = target_cfg.restart, target_cfg.match
    if target_cfg.log_path:
        return LogSource("file", str(target_cfg.log_path), setting="log_path")
    if restart.log_file:
        return LogSource("file", str(restart.log_file), setting="restart.log_file")
    unit = restart.unit or match.systemd_unit
    if unit:
        return LogSource("journal", str(unit))
    kube = match.kubernetes
    if kube is not None and (kube.pod or kube.pod_uid):
        where = "/".join(x for x in (kube.namespace or "?", kube.pod or kube.pod_uid, kube.container) if x)
        return LogSource("kubernetes", where, kube.namespace, kube.pod, kube.container, kube.pod_uid)
    return None


def tail_file(
    path: str | os.PathLike[str], max_bytes: int = MAX_BYTES, *, opener: Opener = open_read
) -> tuple[list[str], bool]:
    """The last ``max_bytes`` of a file as lines (a cut first line dropped); (lines, truncated).
    ``opener`` opens it on the server's behalf (raises ``UnsafePath`` when it refuses)."""
    data, start = read_file_tail(os.fspath(path), max_bytes, opener=opener)
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if start > 0 and lines:
        lines = lines[1:]
    return lines, start > 0


def journal_argv(unit: str, lines: int = JOURNAL_LINES) -> list[str]:
    return ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"]


def read_tail(
    source: LogSource | None,
    *,
    runner: CommandRunner | None = None,
    kube: Callable[[], Any] | None = None,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT_S,
    files: ServerFiles | None = None,
) -> LogTail:
    """Read ``source`` (bounded); ``kube`` builds a ``KubeClient`` on demand; ``files`` counts a
    refused file under its setting. Never raises."""
    if source is None:
        return LogTail(
            None,
            (),
            "no log source: set log_path for this target (or restart.log_file / a systemd unit / a kubernetes match)",
        )
    try:
        if source.kind == "file":
            opener = files.reader(source.setting or "log_path") if files is not None else open_read
            lines, cut = tail_file(Path(source.where), max_bytes, opener=opener)
        elif source.kind == "journal":
            if runner is None:
                return LogTail(source, (), "no command runner to run journalctl")
            res = runner.run(journal_argv(source.where), timeout, max_output=max_bytes)
            if res.timed_out:
                return LogTail(source, (), f"journalctl timed out after {timeout:g} s")
            if res.returncode != 0:
                return LogTail(source, (), f"journalctl exited {res.returncode}: {res.error_text.strip()[:200]}")
            lines, cut = res.text.splitlines(), len(res.text) >= max_bytes
        elif source.kind == "kubernetes":
            if kube is None:
                return LogTail(source, (), "no Kubernetes API client")
            client = kube()
            text = client.read_log(
                source.namespace or "default",
                source.pod,
                source.container,
                previous=True,
                limit_bytes=max_bytes,
                pod_uid=source.pod_uid,
            )
            lines, cut = text.splitlines(), len(text.encode()) >= max_bytes
        else:
            return LogTail(source, (), f"unknown log source kind {source.kind!r}")
    except UnsafePath as e:
        return LogTail(source, (), f"{source.where}: not read: {e.strerror}")
    except FileNotFoundError:
        return LogTail(source, (), f"{source.where}: no such file")
    except PermissionError:
        return LogTail(source, (), f"{source.where}: permission denied")
    except (OSError, GuardianError, BackendUnavailable) as e:
        return LogTail(source, (), f"{source.describe()}: {e}")
    return LogTail(source, tuple(redact_text(x) for x in lines), None, cut)

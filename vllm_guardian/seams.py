"""The built OS contacts the loop works through, typed by their protocols.

``runtime.py`` builds the real ones (``SystemClock``, ``ProcFS`` on the configured proc root,
``StdlibHttpClient``, ``SubprocessRunner``, ``OsProcessControl``, the accelerator backends
``accelerators:`` asks for, the ``ServerFiles`` opener of server logs, pid and key files); tests
build fakes. Nothing else in the loop builds a seam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from vllm_guardian.clock import Clock
from vllm_guardian.host.accel import AccelBackend
from vllm_guardian.host.http import HttpClient
from vllm_guardian.host.process_control import ProcessControl
from vllm_guardian.host.process_details import ProcessDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.host.server_files import ServerFiles


@dataclass(frozen=True)
class Seams:
    clock: Clock
    proc: ProcFS  # /proc under a root (a fake tree in tests)
    http: HttpClient
    commands: CommandRunner  # py-spy, systemctl, npu-smi, drain hooks
    control: ProcessControl  # identity-checked signals, starts
    accel_backends: Sequence[AccelBackend] = ()
    process_details: ProcessDetails | None = None  # psutil, for evidence; only over the real /proc
    files: ServerFiles = field(default_factory=ServerFiles)  # files opened on a server's behalf

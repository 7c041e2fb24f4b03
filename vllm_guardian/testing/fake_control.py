"""A process-control fake that behaves like the kernel in what the remediation relies on:
a signal reaches only a live process with the same identity; SIGKILL always ends it;
SIGTERM ends it unless it ignores SIGTERM; ending the API server can take its tree along.
"""

from __future__ import annotations

from typing import Collection

from vllm_guardian.model import ProcKey


class FakeControl:
    def __init__(
        self,
        alive: Collection[ProcKey] = frozenset(),
        *,
        ignores_term: Collection[ProcKey] = frozenset(),
        term_takes_down: dict[ProcKey, set[ProcKey]] | None = None,
        unkillable: Collection[ProcKey] = frozenset(),
    ):
        self.live = set(alive)
        self.ignores_term = set(ignores_term)
        self.term_takes_down = term_takes_down or {}
        self.unkillable = set(unkillable)
        self.signals: list[tuple[ProcKey, int]] = []
        self.started: list[tuple] = []
        self.specs: list = []  # LaunchSpecs given to start_spec
        self._next_pid = 9000

    def alive(self, key: ProcKey) -> bool:
        return key in self.live

    def signal(self, key: ProcKey, sig: int) -> bool:
        if key not in self.live:
            return False
        self.signals.append((key, sig))
        if key in self.unkillable:
            return True
        if sig == 9 or (sig == 15 and key not in self.ignores_term):
            self.live.discard(key)
            for child in self.term_takes_down.get(key, ()):
                self.live.discard(child)
        return True

    def preflight(self, spec) -> list[str]:
        """The real preflight (log file, cwd, user/group on this host), except that every program
        exists: this control starts none, so a made-up path such as /opt/vllm/bin/python is fine."""
        from vllm_guardian.host.launch import preflight

        return preflight(spec, which=lambda program, path=None: program)

    def start_spec(self, spec) -> int:
        self.specs.append(spec)
        return self.start(spec.argv, dict(spec.env), spec.cwd, spec.log_file)

    def start(self, argv, env, cwd, log_file) -> int:
        self._next_pid += 1
        self.started.append((tuple(argv), dict(env or {}), cwd, log_file))
        return self._next_pid

"""A recorded command runner: scripted answers by argv prefix, every call kept for assertions.

Behaves like ``SubprocessRunner`` in what it claims: a missing binary raises
``BackendUnavailable``; a scripted timeout comes back as ``timed_out`` with no exit code.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.runner import CommandResult

Answer = CommandResult | Callable[[tuple[str, ...]], CommandResult]


def result(
    stdout: str | bytes = b"",
    returncode: int | None = 0,
    stderr: str | bytes = b"",
    timed_out: bool = False,
    duration: float = 0.01,
    argv: Sequence[str] = (),
) -> CommandResult:
    def enc(x: str | bytes) -> bytes:
        return x.encode() if isinstance(x, str) else x

    return CommandResult(tuple(argv), None if timed_out else returncode, enc(stdout), enc(stderr), duration, timed_out)


class FakeRunner:
    def __init__(self, answers: Mapping[tuple[str, ...], Answer] | None = None, missing: Sequence[str] = ()) -> None:
        self.answers: dict[tuple[str, ...], Answer] = dict(answers or {})
        self.missing = set(missing)
        self.calls: list[dict] = []

    def answer(self, prefix: Sequence[str], answer: Answer) -> None:
        self.answers[tuple(prefix)] = answer

    def run(self, argv, timeout, *, max_output=4 * 1024 * 1024, env=None, cwd=None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        self.calls.append({"argv": argv, "timeout": timeout, "env": env, "cwd": cwd})
        if argv[0] in self.missing:
            raise BackendUnavailable(f"{argv[0]}: not found (No such file or directory)")
        best = max((p for p in self.answers if argv[: len(p)] == p), key=len, default=None)
        if best is None:
            return CommandResult(argv, 127, b"", f"no scripted answer for {argv}".encode(), 0.0)
        ans = self.answers[best]
        res = ans(argv) if callable(ans) else ans
        return CommandResult(
            argv,
            res.returncode,
            res.stdout[:max_output],
            res.stderr[:max_output],
            res.duration,
            res.timed_out,
            len(res.stdout) > max_output,
        )

    def argvs(self) -> list[tuple[str, ...]]:
        return [c["argv"] for c in self.calls]

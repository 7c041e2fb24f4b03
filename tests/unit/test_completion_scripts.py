"""The shipped completion scripts (completions/) are what the parser generates now: a command or
option added without regenerating them fails here, in `make check`. Regenerate with
`guardian completion bash > completions/guardian` and `guardian completion zsh > completions/_guardian`."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.cli.parser import completion_script

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"bash": ROOT / "completions" / "guardian", "zsh": ROOT / "completions" / "_guardian"}


@pytest.mark.parametrize("shell", sorted(SHIPPED))
def test_the_shipped_script_is_what_the_parser_generates(shell):
    assert SHIPPED[shell].read_text() == completion_script(shell)

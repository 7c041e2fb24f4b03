"""Shell completion: generated from the parser (shtab), the shipped scripts are what it generates,
and bash, given the script, completes commands, options and choices."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_guardian.cli.main import build_parser, completion_script
from vllm_guardian.cli.help import COMPLETION_NOTE, subcommands

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"bash": ROOT / "completions" / "guardian", "zsh": ROOT / "completions" / "_guardian"}


@pytest.mark.parametrize("shell", sorted(SHIPPED))
def test_the_shipped_script_is_what_the_parser_generates(shell):
    """A new command or option without regenerating fails here: `guardian completion <shell> > <file>`."""
    assert SHIPPED[shell].read_text() == completion_script(shell)


def test_help_of_every_command_mentions_completion(capsys):
    parser = build_parser()
    for argv in [["--help"]] + [[name, "--help"] for name in subcommands(parser)]:
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert " ".join(COMPLETION_NOTE.split()) in " ".join(capsys.readouterr().out.split()), argv


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize(
    "words, expected",
    [
        (["guardian", "al"], {"alerts"}),
        (["vllm-guardian", "che"], {"check-config"}),
        (["guardian", "run", "--log-f"], {"--log-format"}),
        (["guardian", "run", "--log-format", ""], {"text", "json", "logfmt"}),
        (["guardian", "maintenance", ""], {"on", "off", "status"}),
    ],
)
def test_bash_completes_commands_options_and_choices(tmp_path, words, expected):
    script = tmp_path / "guardian.bash"
    script.write_text(completion_script("bash"))
    quoted = " ".join(f"'{w}'" for w in words)
    probe = (
        f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        f'_shtab_guardian; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True).stdout
    assert set(out.split()) == expected

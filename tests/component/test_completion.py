"""Shell completion: every --help mentions it, and bash, given the generated script, completes
commands, options and choices (the shipped scripts: tests/unit/test_completion_scripts.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from vllm_guardian.cli.parser import build_parser, completion_script
from vllm_guardian.cli.help import COMPLETION_NOTE, subcommands


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

"""Every subcommand's --help is something a person can act on: it says what the command does,
every option and argument is explained, and its examples are valid command lines."""

from __future__ import annotations

import shlex

import pytest

from vllm_guardian.cli.parser import build_parser
from vllm_guardian.cli.help import COMMANDS, subcommands

PARSER = build_parser()
SUBS = subcommands(PARSER)


def test_every_subcommand_has_its_help_written():
    assert set(SUBS) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(SUBS))
def test_help_says_what_it_does_and_shows_examples(name, capsys):
    with pytest.raises(SystemExit) as exc:
        PARSER.parse_args([name, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    description, examples = COMMANDS[name]
    assert len(description) > 40 and description.split()[0] in text
    assert "examples:" in text and all(e in text for e in examples)


@pytest.mark.parametrize("name", sorted(SUBS))
def test_every_option_and_argument_is_explained(name):
    bare = [a.option_strings or [a.dest] for a in SUBS[name]._actions if not a.help]
    assert bare == [], f"guardian {name}: no help for {bare}"


@pytest.mark.parametrize("example", [e for _, ex in COMMANDS.values() for e in ex])
def test_every_example_is_a_valid_command_line(example):
    argv = shlex.split(example)
    assert argv[0] == "guardian"
    args = PARSER.parse_args(argv[1:])
    assert args.command == argv[1]


def test_the_top_level_help_points_to_the_commands(capsys):
    with pytest.raises(SystemExit):
        PARSER.parse_args(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in SUBS) and "guardian <command> --help" in out

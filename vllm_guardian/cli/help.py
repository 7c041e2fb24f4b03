"""The help of every ``guardian`` subcommand: what it does, what it needs, examples to copy.

``decorate(parser)`` fills each subcommand's description and examples and gives every option
without a help text one, after ``vllm_guardian.cli.parser.build_parser`` built the commands. Kept apart
from the parsing so the wording can be read (and tested) in one place: a test checks that
every subcommand has a description, examples that parse, and help for every option.
"""

from __future__ import annotations

import argparse

# command -> (description, examples)
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "run": (
        "Run the daemon: discover the vLLM servers of this node, probe them every tick, open "
        "incidents, capture evidence, alert and (unless --dry-run or policy.dry_run) remediate. "
        "Runs until SIGTERM; under systemd it notifies READY=1 after the first tick. Needs root "
        "or CAP_SYS_PTRACE/CAP_KILL to see and act on other users' servers.",
        ("guardian run -c /etc/guardian/guardian.yaml", "guardian run --dry-run -v -c ./guardian.yaml"),
    ),
    "status": (
        "Ask the running daemon (its control socket) what it sees: targets, their processes "
        "and roles, probe errors, open incidents. Exits 1 when no daemon answers. --fleet reads "
        "every node's heartbeat from Redis instead.",
        (
            "guardian status",
            "guardian status --json -c /etc/guardian/guardian.yaml",
            "guardian status --fleet --redis redis://redis.example:6379/0",
        ),
    ),
    "fleet": (
        "Every node x target of the fleet, read from the fleet store only (Redis: the heartbeats, the "
        "alerts stream, the group records): phase, open incidents and their kinds, restarts in the "
        "last 24 h, groups and their lease, each model's health. Text, --json, or --html FILE: a "
        "static page with the look of the incident page. Exits 1 when Redis does not answer.",
        (
            "guardian fleet",
            "guardian fleet --json --redis redis://redis.example:6379/0",
            "guardian fleet --html /tmp/fleet.html --hours 6",
        ),
    ),
    "healthz": (
        "Ask the running daemon (its control socket) whether its main loop ticks: what /healthz answers, "
        "without HTTP, so it works whatever TLS and authentication the web config asks of the listener "
        "(the Helm chart's liveness probe then). Prints the JSON answer; exits 0 while the last tick is "
        "younger than 3 x interval, else 1 (also when no daemon answers).",
        ("guardian healthz", "guardian healthz --socket /var/lib/guardian/guardian.sock"),
    ),
    "check-config": (
        "Validate a config file and print the effective config (defaults filled in); with "
        "api.web_config_file, the web config and its certificates too. "
        "Every problem is printed as 'key.path: what is wrong' and the exit status is 2.",
        ("guardian check-config -c /etc/guardian/guardian.yaml", "guardian check-config"),
    ),
    "workaround": (
        "List the targets running with a known bug's workaround (applied by the guardian on the restart "
        "after a recurrence, when a profile allows it: docs/policy.md), or clear one: its next restart "
        "uses the configured command again.",
        ("guardian workaround list", "guardian workaround clear llm"),
    ),
    "probe": (
        "Run discovery and one round of every probe now, without the daemon, and print what "
        "they see (targets, hottest threads, /health, metrics, accelerators).",
        ("guardian probe", "guardian probe --json -c ./guardian.yaml"),
    ),
    "incidents": (
        "List the incidents kept in the state dir (newest first), or show one with its "
        "signals, actions and evidence bundle path.",
        (
            "guardian incidents list --limit 10",
            "guardian incidents show 01JD3Q8Z7K4Y2X9W5V6T3R1P0N",
            "guardian incidents list --json",
        ),
    ),
    "drain": (
        "Take a target out of rotation (its readiness endpoint answers 503) and wait for its "
        "running and waiting requests to reach 0. Sent to the running daemon.",
        ("guardian drain llama", "guardian drain llama --dry-run"),
    ),
    "restart": (
        "Drain, stop the whole process tree, restart (as restart.mode says) and verify a "
        "target with /health and a canary. Within the restart budget; sent to the running daemon.",
        ("guardian restart llama", "guardian restart llama --dry-run"),
    ),
    "undrain": (
        "Put a drained target back in rotation: its readiness endpoint answers 200 again. Sent to the running daemon.",
        ("guardian undrain llama",),
    ),
    "maintenance": (
        "Pause automatic remediation on this node (detection and alerts go on) for a limited time; it always expires.",
        ("guardian maintenance on --for 2h", "guardian maintenance status", "guardian maintenance off"),
    ),
    "alerts": (
        "Follow the alert stream in Redis (tail), or acknowledge entries of a consumer group (ack).",
        (
            "guardian alerts tail -f",
            "guardian alerts tail --group oncall --consumer me --json",
            "guardian alerts ack 1700000000000-0 --group oncall",
        ),
    ),
    "snapshot": (
        "Capture an evidence bundle now (py-spy dumps, /proc, metrics) for a target name or "
        "a pid, outside any incident. Needs CAP_SYS_PTRACE for py-spy.",
        ("guardian snapshot llama", "guardian snapshot 4242 --record 5"),
    ),
    "completion": (
        "Print the shell completion script for bash or zsh, generated from these commands. The package "
        "installs both (share/bash-completion/completions/guardian, share/zsh/site-functions/_guardian "
        "under its prefix; the container image in /usr/share). To try it: source <(guardian completion bash); "
        "to install it: guardian completion bash > /etc/bash_completion.d/guardian.",
        ("guardian completion bash", "guardian completion zsh"),
    ),
    "demo": (
        "A self-contained demonstration: starts a simulated vLLM server and the guardian in a "
        "temp dir, injects a busy loop in the engine, and shows detection, evidence, alert, drain, "
        "restart and recovery. Needs nothing installed beyond this package.",
        ("guardian demo", "guardian demo --keep --timeout 180"),
    ),
}

COMPLETION_NOTE = "Shell completion: `guardian completion bash|zsh` (installed with the package)."

# option dest -> help, for options the parser left without one
OPTION_HELP = {
    "verbose": "log at DEBUG level",
    "json": "print JSON instead of a table",
    "socket": "the daemon's control socket (default: api.socket, else <state_dir>/guardian.sock)",
    "target": "the target's name (as `guardian status` shows it)",
    "action": "what to do",
    "id": "the incident id (from `guardian incidents list`)",
    "limit": "show at most this many",
    "state": "on: pause remediation; off: resume; status: show",
    "consumer": "consumer name within --group",
    "follow": "keep waiting for new entries (Ctrl-C to stop)",
    "count": "entries per read",
    "timeout": "give up (exit 1) after this many seconds",
}


class _Formatter(argparse.HelpFormatter):
    """Wraps the description; keeps the examples' lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps the subparsers in one _SubParsersAction
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def decorate(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Descriptions, examples (as the epilog) and option help for every subcommand."""
    parser.epilog = "Run `guardian <command> --help` for what a command needs, with examples. " + COMPLETION_NOTE
    for name, sub in _subcommands(parser).items():
        description, examples = COMMANDS.get(name, ("", ()))
        if description:
            sub.description = description
        if examples:
            sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + COMPLETION_NOTE
            sub.formatter_class = _Formatter
        for action in sub._actions:
            if action.help is None and action.dest in OPTION_HELP:
                action.help = OPTION_HELP[action.dest]
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return _subcommands(parser)

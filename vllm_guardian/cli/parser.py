"""The ``guardian`` argument parser: every subcommand, its options and the function that runs it;
``cli.help`` then adds the descriptions and examples. The completion scripts are generated from it."""

from __future__ import annotations

import argparse

from vllm_guardian import __version__
from vllm_guardian.cli.alerts import cmd_alerts
from vllm_guardian.cli.common import CONFIG_ENV, DEFAULT_CONFIG
from vllm_guardian.cli.control import cmd_control, cmd_maintenance, parse_duration
from vllm_guardian.cli.daemon import cmd_check_config, cmd_demo, cmd_probe, cmd_run
from vllm_guardian.cli.fleet import cmd_fleet
from vllm_guardian.cli.incidents import cmd_incidents, cmd_snapshot
from vllm_guardian.cli.status import cmd_healthz, cmd_status
from vllm_guardian.cli.workaround import cmd_workaround


def cmd_completion(args) -> int:
    """The shell's completion script, generated from this parser (shtab)."""
    print(completion_script(args.shell), end="")
    return 0


def completion_script(shell: str) -> str:
    """shtab's script for ``guardian``, bound to the ``vllm-guardian`` alias too."""
    import shtab

    text = shtab.complete(build_parser(), shell=shell).rstrip("\n") + "\n"
    if shell == "bash":
        return text.removesuffix(" guardian\n") + " guardian vllm-guardian\n"
    return text.replace("#compdef guardian\n", "#compdef guardian vllm-guardian\n", 1)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guardian", description="Supervise the vLLM servers of this node.")
    p.add_argument("--version", action="version", version=f"guardian {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp):
        sp.add_argument(
            "-c",
            "--config",
            default=None,
            help=f"YAML config (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG} when it exists, else built-in defaults)",
        )
        return sp

    def with_logging(sp):
        from vllm_guardian.surface.logs import FORMATS, LEVELS

        sp.add_argument(
            "--log-format",
            choices=FORMATS,
            default=None,
            help="text (default), json or logfmt (default: $GUARDIAN_LOG_FORMAT, else log.format)",
        )
        sp.add_argument(
            "--log-level",
            choices=LEVELS,
            default=None,
            help="the lowest level logged (default: $GUARDIAN_LOG_LEVEL, else log.level: info)",
        )
        sp.add_argument("-v", "--verbose", action="store_true", help="the same as --log-level debug")
        return sp

    sp = with_config(sub.add_parser("run", help="run the daemon"))
    sp.add_argument("--dry-run", action="store_true", help="detect and alert, never act")
    with_logging(sp)
    sp.set_defaults(fn=cmd_run)

    sp = with_config(sub.add_parser("status", help="targets, processes, signals, open incidents"))
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--fleet", action="store_true", help="every node, from Redis heartbeats")
    sp.add_argument("--redis", default=None, help="Redis URL for --fleet (default: the configured one)")
    sp.add_argument("--socket", default=None, help="control socket (default from config)")
    sp.set_defaults(fn=cmd_status)

    sp = with_config(sub.add_parser("fleet", help="every node x target of the fleet, from the fleet store (Redis)"))
    out = sp.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--html", default=None, metavar="FILE", help="write the fleet page (static HTML) to FILE")
    sp.add_argument("--hours", type=float, default=24.0, help="restarts counted over this many hours (default 24)")
    sp.add_argument("--redis", default=None, help="Redis URL (default: the configured one)")
    sp.set_defaults(fn=cmd_fleet)

    sp = with_config(sub.add_parser("healthz", help="the daemon's own liveness: exit 0 while its loop ticks"))
    sp.add_argument("--socket", default=None, help="control socket (default from config)")
    sp.set_defaults(fn=cmd_healthz)

    sp = with_config(sub.add_parser("check-config", help="validate and print the effective config"))
    sp.set_defaults(fn=cmd_check_config)

    sp = with_config(sub.add_parser("probe", help="print what the probes see now"))
    sp.add_argument("--once", action="store_true", help="one round (the default and only mode)")
    sp.add_argument("--json", action="store_true")
    with_logging(sp)
    sp.set_defaults(fn=cmd_probe)

    sp = with_config(sub.add_parser("incidents", help="list or show incidents from the state dir"))
    sp.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    sp.add_argument("id", nargs="?")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--html", action="store_true", help="show: write the incident page (report.html), print its path")
    sp.add_argument("--limit", type=int, default=50)
    sp.set_defaults(fn=cmd_incidents)

    for name, what in (
        ("drain", "take a target out of rotation and drain it"),
        ("restart", "drain, stop, restart and verify a target"),
        ("undrain", "put a drained target back in rotation"),
    ):
        sp = with_config(sub.add_parser(name, help=what))
        sp.add_argument("target")
        sp.add_argument("--socket", default=None)
        if name != "undrain":
            sp.add_argument("--dry-run", action="store_true", help="say what would happen, do nothing")
        sp.set_defaults(fn=cmd_control)

    sp = with_config(sub.add_parser("maintenance", help="pause automatic remediation"))
    sp.add_argument("state", choices=("on", "off", "status"))
    sp.add_argument(
        "--for",
        dest="duration",
        type=parse_duration,
        default=3600.0,
        help="how long (e.g. 30m, 2h; default 1h): it always expires",
    )
    sp.set_defaults(fn=cmd_maintenance)

    sp = sub.add_parser("alerts", help="follow or acknowledge the alert stream in Redis")
    sp.set_defaults(fn=cmd_alerts)
    # tail and ack are commands of their own, so options may come before or after the entry ids
    alerts = sp.add_subparsers(dest="action", required=True, metavar="{tail,ack}", help="tail: read; ack: acknowledge")
    common = argparse.ArgumentParser(add_help=False)
    with_config(common)
    common.add_argument("--redis", default=None, help="Redis URL (default: the configured one)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    tail = alerts.add_parser(
        "tail",
        parents=[common],
        help="the last events, then (--follow) new ones; with --group, as a group member",
        description="Print the last events of the alert stream; --follow waits for new ones. With --group and "
        "--consumer, read as a member of a consumer group (entries stay pending until acked).",
    )
    tail.add_argument("--group", default=None, help="consumer group (created if missing)")
    tail.add_argument("--consumer", default=None, help="consumer name within --group")
    tail.add_argument("-n", "--count", type=int, default=10, help="entries per read (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep waiting for new entries (Ctrl-C to stop)")
    tail.add_argument("--block", type=float, default=5.0, help="seconds per blocking read")
    tail.add_argument("--claim-idle-ms", type=int, default=None, help="XAUTOCLAIM entries idle this long")
    tail.set_defaults(ids=[])
    ack = alerts.add_parser(
        "ack",
        parents=[common],
        help="acknowledge stream entries of a consumer group",
        description="Acknowledge entries of a consumer group (XACK), so they leave its pending list.",
    )
    ack.add_argument("ids", nargs="+", metavar="ENTRY_ID", help="stream entry ids to ack (e.g. 1717243203500-0)")
    ack.add_argument("--group", required=True, help="the consumer group the entries were read in")
    ack.set_defaults(consumer=None, count=10, follow=False, block=5.0, claim_idle_ms=None)

    sp = with_config(sub.add_parser("snapshot", help="capture an evidence bundle now"))
    sp.add_argument("what", help="a pid or a target name")
    sp.add_argument("--record", type=float, default=None, help="seconds of py-spy record (default from config)")
    sp.set_defaults(fn=cmd_snapshot)

    sp = with_config(sub.add_parser("workaround", help="list or clear the known-bug workarounds targets run with"))
    sp.add_argument("action", choices=("list", "clear"))
    sp.add_argument("target", nargs="?", help="clear: the target returning to its configured command")
    sp.set_defaults(fn=cmd_workaround)

    sp = sub.add_parser("completion", help="print the bash or zsh completion script")
    sp.add_argument("shell", choices=("bash", "zsh"), help="the shell the script is for")
    sp.set_defaults(fn=cmd_completion)

    sp = sub.add_parser("demo", help="a self-contained demonstration on a simulated vLLM server")
    sp.add_argument("--keep", action="store_true", help="keep the demo's state dir")
    sp.add_argument("--timeout", type=float, default=120.0)
    sp.set_defaults(fn=cmd_demo)
    from vllm_guardian.cli.help import decorate  # descriptions, examples and option help of every command

    return decorate(p)

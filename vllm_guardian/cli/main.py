"""``guardian``: the one entry point. The only module that parses argv and exits.

Every failure is one line on stderr that says what failed, where, and what to do; the exit codes
(``EXIT_CODES``, listed in docs/operate.md) let scripts tell them apart. ``GUARDIAN_DEBUG=1`` adds
the Python traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Sequence

from vllm_guardian import __version__
from vllm_guardian.errors import BackendUnavailable, CannotStart, ConfigError, GuardianError
from vllm_guardian.surface.terminal import EscapingWriter

DEFAULT_CONFIG = "/etc/guardian/guardian.yaml"
CONFIG_ENV = "GUARDIAN_CONFIG"  # the config file when -c is not given (as systemd's EnvironmentFile may set it)
EXIT_CODES = {
    0: "ok",
    1: "runtime failure: the daemon or Redis not reachable, nothing found, a request refused",
    2: "usage or configuration error: the message names the option or config key",
    3: "cannot start: the HTTP port is taken or another guardian holds the state dir",
    70: "internal error (a bug): rerun with GUARDIAN_DEBUG=1 and report the traceback",
    130: "interrupted (Ctrl-C)",
    141: "the output pipe was closed (e.g. `| head`): nothing else went wrong",
}
MAX_DURATION = 366 * 86400  # a maintenance window longer than a year is a typo


def _load(path: str | None, dry_run: bool = False):
    from dataclasses import replace

    from vllm_guardian.config.loader import load_config

    if path is None and os.environ.get(CONFIG_ENV):
        path = os.environ[CONFIG_ENV]
        if not os.path.exists(path):
            raise ConfigError([f"{CONFIG_ENV}={path}: no such file (unset it, or point it at a config)"])
    cfg = load_config(path)
    from vllm_guardian.diagnosis.catalog_load import CatalogError, load_catalogs

    try:  # a bad signature catalog is a config error: named, before anything starts
        load_catalogs(cfg.diagnosis.catalogs)
    except CatalogError as e:
        raise ConfigError([f"diagnosis.catalogs: {line}" for line in str(e).splitlines()]) from None
    if dry_run:
        cfg = replace(cfg, policy=replace(cfg.policy, dry_run=True))
    return cfg


def _setup_logging(args, cfg) -> None:
    """The flags, else GUARDIAN_LOG_FORMAT / GUARDIAN_LOG_LEVEL, else the config's ``log`` section."""
    from vllm_guardian.surface.logs import FORMAT_ENV, FORMATS, LEVEL_ENV, LEVELS, choose, setup_logging

    level_flag = "debug" if getattr(args, "verbose", False) else getattr(args, "log_level", None)
    try:
        fmt = choose(getattr(args, "log_format", None), FORMAT_ENV, cfg.log.format, FORMATS, os.environ)
        level = choose(level_flag, LEVEL_ENV, cfg.log.level, LEVELS, os.environ)
    except ValueError as e:
        raise ConfigError([str(e)]) from None
    setup_logging(fmt, level)


# ---------------------------------------------------------------------- commands
def cmd_run(args) -> int:
    cfg = _load(args.config, args.dry_run)
    _setup_logging(args, cfg)
    os.makedirs(cfg.state_dir, mode=0o750, exist_ok=True)
    from vllm_guardian.surface.instance_lock import InstanceLock

    with InstanceLock(cfg.state_dir):  # before anything starts: a second guardian touches nothing
        return _run_locked(args, cfg)


def _run_locked(args, cfg) -> int:
    from vllm_guardian.loop.runtime import Runtime

    rt = Runtime.start(cfg, load_config=lambda: _load(args.config, args.dry_run))
    stop = threading.Event()

    def on_signal(signum, frame):
        logging.getLogger("guardian").info("signal %d: shutting down", signum)
        stop.set()
        rt.clock.wake()

    def on_hup(signum, frame):  # systemctl reload (ExecReload=kill -HUP $MAINPID)
        logging.getLogger("guardian").info("SIGHUP: re-reading the config after this tick")
        rt.request_reload()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hup)
    try:
        rt.run(stop)
    finally:
        rt.close()
    return 0


def cmd_status(args) -> int:
    from vllm_guardian.surface.control_socket import request
    from vllm_guardian.surface.status_view import render_status

    if args.fleet:
        from vllm_guardian.sinks.fleet import fleet_status, render_fleet

        cfg = _load(args.config)
        client, url = _redis_client(cfg, args.redis)
        try:
            rows = fleet_status(client)
        except Exception as e:  # noqa: BLE001 - redis-py raises its own classes and OSError alike
            raise _redis_unreachable(cfg, url, args.redis, e) from None
        print(json.dumps(rows, indent=2) if args.json else render_fleet(rows, time.time()))
        return 0
    # the socket named: no config is read (it may be one that a reload refused)
    path = args.socket or _load(args.config).socket_path()
    try:
        doc = request(path, {"cmd": "status"})
    except (OSError, RuntimeError, ValueError) as e:
        print(_not_reachable(path, e), file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else render_status(doc))
    return 0


def _not_reachable(path: str, e: BaseException) -> str:
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return (
        f"guardian: the daemon is not reachable on {path} ({why}); is `guardian run` running with this config "
        "(systemctl status vllm-guardian)? Else pass -c with its config or --socket PATH"
    )


def cmd_check_config(args) -> int:
    from vllm_guardian.config.loader import render_check

    cfg = _load(args.config)
    if cfg.gates.enabled:  # the trust keys are read as `guardian run` reads them (never printed)
        from vllm_guardian.gates.trust import load_keys

        load_keys(cfg.gates.trust.keys_file, cfg.gates.trust.key_env)
    print(render_check(cfg))
    return 0


def cmd_probe(args) -> int:
    from vllm_guardian.surface.status_view import render_status

    cfg = _load(args.config)
    _setup_logging(args, cfg)
    from vllm_guardian.loop.runtime import build_daemon, real_seams

    daemon = build_daemon(cfg, real_seams(cfg))
    budget = cfg.probes.vllm_http.timeout * 2 + cfg.probes.canary.timeout + 1
    try:
        daemon.tick()  # discovery + first /proc reading (rates need two)
        time.sleep(cfg.probes.procfs.interval)
        daemon.tick()  # rates, HTTP scrapes start
        daemon.runner.wait_idle(budget)
        daemon.tick()  # scrapes folded in; canaries start where /health is 200
        daemon.runner.wait_idle(budget)
        daemon.tick()
    finally:
        daemon.runner.shutdown()
    doc = daemon.status().to_dict()
    print(json.dumps(doc, indent=2) if args.json else render_status(doc))
    return 0 if doc["targets"] else 1


def cmd_incidents(args) -> int:
    from vllm_guardian.incidents import IncidentStore, incident_to_dict

    cfg = _load(args.config)
    store = IncidentStore(cfg.state_dir)
    if args.action == "show":
        if not args.id:
            print(
                "guardian incidents show: needs an incident id (`guardian incidents list` shows them)", file=sys.stderr
            )
            return 2
        try:
            inc = store.load(args.id)
        except ValueError as e:
            print(
                f"guardian: {e} (an incident id is the name of a folder under {cfg.state_dir}/incidents)",
                file=sys.stderr,
            )
            return 2
        if inc is None:
            print(
                f"guardian: no incident {args.id} in {cfg.state_dir}/incidents "
                "(`guardian incidents list` shows the ids)",
                file=sys.stderr,
            )
            return 1
        d = incident_to_dict(inc)
        if args.json:
            print(json.dumps(d, indent=2))
            return 0
        if args.html:
            return _show_html(d)
        print(f"{d['id']}  {d['kind']}  {d['status']}  severity {d['severity']}")
        print(f"target  {d['target']['name']} (pid {d['target']['pid']}, starttime {d['target']['starttime']})")
        print(f"opened  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d['opened_at']))}")
        if d["resolved_at"]:
            print(f"resolved {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d['resolved_at']))}")
        print(f"summary {d['summary']}")
        print(f"runbook {_runbook(d['kind'])}")
        from vllm_guardian.diagnosis.text import diagnosis_lines

        if d["diagnosis"] or d["crash"] or d.get("evidence_dir"):
            for line in diagnosis_lines(d["diagnosis"], d["crash"]):
                print(line)
        print("signals")
        for k, v in sorted(d["signals"].items()):
            print(f"  {k}: {v}")
        for a in d["actions"]:
            print(f"action  {a['name']} {a['status']} {a['detail']}")
        if d.get("evidence_dir"):
            from vllm_guardian.bundle.evidence import read_summary

            print(f"evidence {d['evidence_dir']}")
            if not os.path.isdir(d["evidence_dir"]):
                print("  (the evidence folder is missing: removed by retention or by hand)")
                return 0
            try:
                print()
                print(read_summary(d["evidence_dir"]))
            except FileNotFoundError:
                print("  (no summary.txt in the bundle)")
            except (OSError, UnicodeDecodeError) as e:
                print(f"  (summary.txt unreadable: {e})")
            try:
                for f in sorted(os.listdir(d["evidence_dir"])):
                    print(f"  {f}")
            except OSError as e:
                print(f"  (cannot list the bundle: {e.strerror or e})")
        return 0
    items = [incident_to_dict(i) for i in store.list(limit=args.limit)]
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    if not items:
        print(f"no incidents in {cfg.state_dir}/incidents")
    for d in items:
        opened = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["opened_at"]))
        print(f"{d['id']}  {d['status']:<8} {d['kind']:<14} {d['target']['name']:<14} {opened}  {d['summary']}")
    return 0


def _runbook(kind: str) -> str:
    """The runbook's URL, and its copy installed beside the program when there is one."""
    from vllm_guardian.incidents.runbooks import runbook_url

    local = os.path.join(sys.prefix, "share", "doc", "vllm-guardian", "runbooks", f"{kind}.md")
    return runbook_url(kind) + (f" (here: {local})" if os.path.isfile(local) else "")


def _show_html(d: dict) -> int:
    """``incidents show ID --html``: (re)write the bundle's report.html with the incident as it is now
    and print its path; without a bundle, or where it cannot be written, the page goes to stdout."""
    from vllm_guardian.diagnosis.report_html import ReportInput, read_bundle, render_report, write_report

    if d.get("evidence_dir") and os.path.isdir(d["evidence_dir"]):
        try:
            print(write_report(d["evidence_dir"], d))
            return 0
        except OSError:
            print(render_report(read_bundle(d["evidence_dir"], d)))
            return 0
    print(render_report(ReportInput(d, d["id"], diagnosis=d.get("diagnosis") or (), crash=d.get("crash"))))
    return 0


def cmd_control(args) -> int:
    """drain / restart / undrain a target through the running daemon (same safety checks)."""
    from vllm_guardian.surface.control_socket import request

    cfg = _load(args.config)
    path = args.socket or cfg.socket_path()
    req = {"cmd": args.command, "target": args.target, "dry_run": getattr(args, "dry_run", False)}
    try:
        print(request(path, req, timeout=15))
    except (OSError, ValueError) as e:
        print(_not_reachable(path, e), file=sys.stderr)
        return 1
    except RuntimeError as e:
        print(f"guardian {args.command} {args.target}: refused: {e}", file=sys.stderr)
        return 1
    return 0


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1d' or plain seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be a finite number > 0, got {text!r}")
    if value > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"a duration must be at most {MAX_DURATION // 86400:g}d, got {text!r}")
    return value


def cmd_maintenance(args) -> int:
    from vllm_guardian.remediation.policy import Maintenance

    cfg = _load(args.config)
    m = Maintenance(cfg.state_dir)
    if args.state == "on":
        until = m.turn_on(time.time(), args.duration)
        print(
            f"maintenance on until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(until))}: "
            "no automatic remediation (detection and alerts go on)"
        )
    elif args.state == "off":
        print("maintenance off" if m.turn_off() else "maintenance was not on")
    else:
        u = m.until()
        on = u is not None and u > time.time()
        print(f"maintenance {'on until ' + time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(u)) if on else 'off'}")
    return 0


def _redis_client(cfg, url: str | None, timeout: float | None = None):
    """(client, url) for ``--redis URL``, else the configured Redis (the embedded one's socket included)."""
    from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
    from vllm_guardian.sinks.redis_sink import make_client, resolve_password

    if not url:
        url = EmbeddedRedis(cfg.state_dir).url if cfg.alerts.redis_url == "embedded" else cfg.alerts.redis_url
    password = resolve_password(cfg.alerts.password_env, cfg.alerts.password_file)
    return make_client(url, password=password, timeout=timeout or cfg.alerts.timeout), url


def _redis_unreachable(cfg, url: str, given: str | None, e: BaseException) -> GuardianError:
    """The one line for a Redis that does not answer: which one, why, and what to do."""
    if not isinstance(e, (OSError, BackendUnavailable)) and type(e).__module__.split(".")[0] != "redis":
        return GuardianError(f"Redis at {url}: {type(e).__name__}: {e}")
    why = str(e).removeprefix("Redis: ")
    if given is None and cfg.alerts.redis_url == "embedded":
        hint = (
            "the embedded Redis runs only while `guardian run` does (same config, same state_dir): "
            "start the guardian, or pass --redis URL"
        )
    else:
        hint = "check that it runs and the URL/password (alerts.redis_url, alerts.password_env), or pass --redis URL"
    return GuardianError(f"Redis at {url} is not reachable ({why}); {hint}")


def cmd_alerts(args) -> int:
    from vllm_guardian.sinks.fleet import alerts_main

    cfg = _load(args.config)
    block_ms = int(args.block * 1000) if args.follow or args.group else None
    client, url = _redis_client(cfg, args.redis, timeout=(block_ms or 0) / 1000 + cfg.alerts.timeout + 1)
    try:
        return alerts_main(
            client,
            args.action,
            stream=cfg.alerts.stream,
            group=args.group,
            consumer=args.consumer,
            count=args.count,
            block_ms=block_ms,
            follow=args.follow,
            claim_idle_ms=args.claim_idle_ms,
            entry_ids=args.ids,
            as_json=args.json,
        )
    except KeyboardInterrupt:
        return 0
    except BackendUnavailable as e:
        raise _redis_unreachable(cfg, url, args.redis, e) from None


def cmd_snapshot(args) -> int:
    from vllm_guardian.bundle.evidence import EvidenceCollector, target_for_pid
    from vllm_guardian.clock import SystemClock
    from vllm_guardian.discovery.scan import discover
    from vllm_guardian.host.process_details import PsutilDetails
    from vllm_guardian.host.procfs import ProcFS
    from vllm_guardian.host.runner import SubprocessRunner
    from vllm_guardian.incidents import IncidentStore

    cfg = _load(args.config)
    procfs = ProcFS(cfg.probes.procfs.proc_root)
    if args.what.isdigit():
        target = target_for_pid(procfs, int(args.what), cfg.discovery.process_name_prefix)
    else:
        found = discover(procfs, cfg).target(args.what)
        if found is None:
            print(
                f"guardian: no target named {args.what!r} on this node (`guardian probe` lists what discovery finds; "
                "a pid works too)",
                file=sys.stderr,
            )
            return 1
        target = found
    os.makedirs(cfg.state_dir, mode=0o750, exist_ok=True)
    details = PsutilDetails() if os.path.realpath(cfg.probes.procfs.proc_root) == "/proc" else None
    collector = EvidenceCollector(
        cfg.evidence, IncidentStore(cfg.state_dir).dir_for, SubprocessRunner(), procfs, SystemClock(), details=details
    )
    res = collector.snapshot(target, record_seconds=args.record)
    print(f"bundle {res.dir} ({len(res.files)} files, {res.duration:.2f}s)")
    for what, why in res.failures.items():
        print(f"  not captured: {what}: {why}")
    return 0 if res.files else 1


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


def cmd_demo(args) -> int:
    from vllm_guardian.sim.demo import run_demo  # the demo drives the shipped simulated vLLM server

    return run_demo(keep=args.keep, timeout=args.timeout)


# ---------------------------------------------------------------------- argv
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

    sp = sub.add_parser("completion", help="print the bash or zsh completion script")
    sp.add_argument("shell", choices=("bash", "zsh"), help="the shell the script is for")
    sp.set_defaults(fn=cmd_completion)

    sp = sub.add_parser("demo", help="a self-contained demonstration on a simulated vLLM server")
    sp.add_argument("--keep", action="store_true", help="keep the demo's state dir")
    sp.add_argument("--timeout", type=float, default=120.0)
    sp.set_defaults(fn=cmd_demo)
    from vllm_guardian.cli.help import decorate  # descriptions, examples and option help of every command

    return decorate(p)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdout = sys.stdout
    if args.command != "run":  # text for a person's terminal: others' control characters made visible
        sys.stdout = EscapingWriter(stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = stdout


def _main(args: argparse.Namespace) -> int:
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except ConfigError as e:
        for line in e.problems:
            print(f"guardian: {line}", file=sys.stderr)
        return 2
    except CannotStart as e:
        print(f"guardian: {e}", file=sys.stderr)
        return 3
    except GuardianError as e:
        print(f"guardian: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        print(f"guardian {args.command}: {e.strerror or e}{where}; check the path and its permissions", file=sys.stderr)
        return 1
    except Exception as e:  # the last resort (re-raised with GUARDIAN_DEBUG): one line, not a traceback
        if os.environ.get("GUARDIAN_DEBUG"):
            raise
        print(
            f"guardian {args.command}: internal error {type(e).__name__}: {e} "
            "(a bug: rerun with GUARDIAN_DEBUG=1 for the traceback and report it)",
            file=sys.stderr,
        )
        return 70


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's last flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

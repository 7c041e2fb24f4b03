"""The commands that change what the guardian does: ``drain`` / ``restart`` / ``undrain`` through the
running daemon (the same safety checks as its own decisions) and ``maintenance`` (a pause of automatic
remediation that always expires)."""

from __future__ import annotations

import argparse
import math
import sys
import time

from vllm_guardian.cli.common import load_config, not_reachable

MAX_DURATION = 366 * 86400  # a maintenance window longer than a year is a typo


def cmd_control(args) -> int:
    """drain / restart / undrain a target through the running daemon (same safety checks)."""
    from vllm_guardian.surface.control_socket import request

    cfg = load_config(args.config)
    path = args.socket or cfg.socket_path()
    req = {"cmd": args.command, "target": args.target, "dry_run": getattr(args, "dry_run", False)}
    try:
        print(request(path, req, timeout=15))
    except (OSError, ValueError) as e:
        print(not_reachable(path, e), file=sys.stderr)
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

    cfg = load_config(args.config)
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

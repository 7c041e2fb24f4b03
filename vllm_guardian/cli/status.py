"""``guardian status``: what the running daemon sees (its control socket), or with ``--fleet`` every
node's heartbeat from Redis; ``guardian healthz``: whether its main loop ticks (its control socket)."""

from __future__ import annotations

import json
import sys
import time

from vllm_guardian.cli.common import load_config, not_reachable, redis_client, redis_unreachable


def cmd_status(args) -> int:
    from vllm_guardian.surface.control_socket import request
    from vllm_guardian.surface.status_render import render_status
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

    if args.fleet:
        from vllm_guardian.sinks.fleet import fleet_status, render_fleet

        cfg = load_config(args.config)
        client, url = redis_client(cfg, args.redis)
        try:
            rows = fleet_status(client)
        except Exception as e:  # noqa: BLE001 - redis-py raises its own classes and OSError alike
            raise redis_unreachable(cfg, url, args.redis, e) from None
        print(json.dumps(rows, indent=2) if args.json else render_fleet(rows, time.time()))
        return 0
    # the socket named: no config is read (it may be one that a reload refused)
    path = args.socket or load_config(args.config).socket_path()
    try:
        doc = request(path, {"cmd": "status"})
    except (OSError, RuntimeError, ValueError) as e:
        print(not_reachable(path, e), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    try:
        snapshot = StatusSnapshot.from_dict(doc)
    except ValueError as e:
        print(f"guardian status: the guardian at {path} answered a status this CLI cannot read ({e})", file=sys.stderr)
        return 1
    print(render_status(snapshot))
    return 0


def cmd_healthz(args) -> int:
    """The daemon's ``/healthz`` over its control socket: 0 while its loop ticks, else 1."""
    from vllm_guardian.surface.control_socket import request

    path = args.socket or load_config(args.config).socket_path()
    try:
        doc = request(path, {"cmd": "healthz"})
    except (OSError, RuntimeError, ValueError) as e:
        print(not_reachable(path, e), file=sys.stderr)
        return 1
    print(json.dumps(doc))
    return 0 if isinstance(doc, dict) and doc.get("ok") is True else 1

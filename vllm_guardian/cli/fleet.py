"""``guardian fleet``: every node × target of the fleet, read from the fleet store (Redis) only: text,
``--json``, or a static page (``--html FILE``, the look of the incident page)."""

from __future__ import annotations

import json
import time

from vllm_guardian.cli.common import load_config, redis_client, redis_unreachable


def cmd_fleet(args) -> int:
    from vllm_guardian.sinks.fleet_view import read_fleet, render_text

    cfg = load_config(args.config)
    client, url = redis_client(cfg, args.redis)
    try:
        view = read_fleet(client, stream=cfg.alerts.stream, now_wall=time.time(), window_s=args.hours * 3600)
    except Exception as e:  # noqa: BLE001 - redis-py raises its own classes and OSError alike
        raise redis_unreachable(cfg, url, args.redis, e) from None
    if args.html:
        from vllm_guardian.surface.fleet_html import render_fleet_html
        from vllm_guardian.fsutil import atomic_write

        atomic_write(args.html, render_fleet_html(view).encode("utf-8"), mode=0o644)
        print(args.html)
        return 0
    print(json.dumps(view.to_dict(), indent=2) if args.json else render_text(view))
    return 0

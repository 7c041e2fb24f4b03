"""``guardian alerts tail|ack``: the alert stream in Redis, followed or acknowledged as a consumer group."""

from __future__ import annotations

from vllm_guardian.cli.common import load_config, redis_client, redis_unreachable
from vllm_guardian.errors import BackendUnavailable


def cmd_alerts(args) -> int:
    from vllm_guardian.sinks.fleet import alerts_main

    cfg = load_config(args.config)
    block_ms = int(args.block * 1000) if args.follow or args.group else None
    client, url = redis_client(cfg, args.redis, timeout=(block_ms or 0) / 1000 + cfg.alerts.timeout + 1)
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
        raise redis_unreachable(cfg, url, args.redis, e) from None

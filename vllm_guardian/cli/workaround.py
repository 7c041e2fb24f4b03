"""``guardian workaround list|clear <target>``: which targets run with a known bug's workaround
(``<state_dir>/workarounds.json``, docs/policy.md) and dropping one, so the next restart uses the
original command. Read and written without the daemon."""

from __future__ import annotations

import json
import sys

from vllm_guardian.cli.common import load_config


def cmd_workaround(args) -> int:
    from vllm_guardian.policy.workaround import WorkaroundState

    cfg = load_config(args.config)
    state = WorkaroundState(cfg.state_dir)
    if args.action == "list":
        print(json.dumps({k: v.to_dict() for k, v in state.load().items()}, indent=2, sort_keys=True))
        return 0
    if not args.target:
        print("guardian workaround clear: needs a target name (`guardian workaround list` shows them)", file=sys.stderr)
        return 2
    if state.clear(args.target):
        print(f"{args.target}: workaround cleared; its next restart uses the configured command")
        return 0
    print(f"guardian: {args.target} runs with no workaround", file=sys.stderr)
    return 1

"""The commands that run the guardian on this node: ``run`` (the daemon, until SIGTERM), ``probe`` (one
round of every probe, printed), ``check-config`` and ``demo``."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time

from vllm_guardian.cli.common import load_config, setup_logging


def cmd_run(args) -> int:
    cfg = load_config(args.config, args.dry_run)
    setup_logging(args, cfg)
    os.makedirs(cfg.state_dir, mode=0o750, exist_ok=True)
    from vllm_guardian.host.state_dir import check_state_dir
    from vllm_guardian.surface.instance_lock import InstanceLock

    check_state_dir(cfg.state_dir)  # CannotStart (exit 3) unless it is the guardian's own

    with InstanceLock(cfg.state_dir):  # before anything starts: a second guardian touches nothing
        return _run_locked(args, cfg)


def _run_locked(args, cfg) -> int:
    from vllm_guardian.loop.runtime import Runtime

    rt = Runtime.start(cfg)
    rt.load_config = lambda: load_config(args.config, args.dry_run)
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


def cmd_probe(args) -> int:
    from vllm_guardian.surface.status_render import render_status

    cfg = load_config(args.config)
    setup_logging(args, cfg)
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
    snapshot = daemon.status()
    print(json.dumps(snapshot.to_dict(), indent=2) if args.json else render_status(snapshot))
    return 0 if snapshot.targets else 1


def cmd_check_config(args) -> int:
    from vllm_guardian.config.loader import render_check

    cfg = load_config(args.config)
    # the trust keys are read as `guardian run` reads them, gates on or off: they sign the control
    # messages too (never printed)
    from vllm_guardian.gates.trust import load_keys

    load_keys(cfg.gates.trust.keys_file, cfg.gates.trust.key_env)
    if cfg.api.http and cfg.api.web_config_file:  # read and built as `guardian run` does (never printed)
        from vllm_guardian.surface.web_security import load_active

        load_active(cfg.api.web_config_file)
    print(render_check(cfg) + policy_lines(cfg))
    return 0


def policy_lines(cfg) -> str:
    """``# profile`` comment lines (which profile each configured target gets, docs/policy.md) and
    ``# device fault rule`` lines. Offline, a target's facts are its config's: name, model, node."""
    from vllm_guardian.policy import fault_rules, profiles

    facts = [
        profiles.TargetFacts(node=cfg.node or "", target=t.name, model=t.model, node_labels=dict(cfg.node_labels))
        for t in cfg.targets
    ]
    lines = [f"# profile {line}" for line in profiles.describe(cfg.policy, facts)]
    lines += [f"# device fault rule {line}" for line in fault_rules.describe(cfg.policy.device_fault_rules)]
    return "".join(line + "\n" for line in lines)


def cmd_demo(args) -> int:
    from vllm_guardian.sim.demo import run_demo  # the demo drives the shipped simulated vLLM server

    return run_demo(keep=args.keep, timeout=args.timeout)

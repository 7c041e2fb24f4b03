"""``guardian incidents`` (list, show, the incident page) and ``guardian snapshot`` (an evidence bundle
now): what the state dir holds, read without the daemon."""

from __future__ import annotations

import json
import os
import sys
import time

from vllm_guardian.cli.common import load_config


def cmd_incidents(args) -> int:
    from vllm_guardian.incidents import IncidentStore, incident_to_dict

    cfg = load_config(args.config)
    store = IncidentStore(cfg.state_dir)
    if args.html and args.action != "show":  # never ignored silently
        print(
            "guardian incidents: --html writes one incident's page: `guardian incidents show ID --html`",
            file=sys.stderr,
        )
        return 2
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


def cmd_snapshot(args) -> int:
    from vllm_guardian.bundle.evidence import EvidenceCollector
    from vllm_guardian.bundle.pid_target import target_for_pid
    from vllm_guardian.clock import SystemClock
    from vllm_guardian.discovery.scan import discover
    from vllm_guardian.host.process_details import PsutilDetails
    from vllm_guardian.host.procfs import ProcFS
    from vllm_guardian.host.runner import SubprocessRunner
    from vllm_guardian.host.state_dir import check_state_dir
    from vllm_guardian.incidents import IncidentStore

    cfg = load_config(args.config)
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
    check_state_dir(cfg.state_dir)  # the bundle goes there: it must be the guardian's own
    details = PsutilDetails() if os.path.realpath(cfg.probes.procfs.proc_root) == "/proc" else None
    collector = EvidenceCollector(
        cfg.evidence, IncidentStore(cfg.state_dir).dir_for, SubprocessRunner(), procfs, SystemClock(), details=details
    )
    res = collector.snapshot(target, record_seconds=args.record)
    print(f"bundle {res.dir} ({len(res.files)} files, {res.duration:.2f}s)")
    for what, why in res.failures.items():
        print(f"  not captured: {what}: {why}")
    return 0 if res.files else 1

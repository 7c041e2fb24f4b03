"""The checks across fields, after the walk: one matcher per target, a namespace for Kubernetes
matching, one source of an API key, what each restart mode needs, unique target names, a state_dir,
a web config only for a listener that is on, Alertmanager URLs that are http(s) URLs (at most 8),
``node_labels`` shaped like Kubernetes labels."""

from __future__ import annotations

import dataclasses

from vllm_guardian.config.mapping import Invalid
from vllm_guardian.config.rules import show
from vllm_guardian.config.schema import Config, KubernetesMatch, MatchConfig, TargetConfig
from vllm_guardian.config.schema_alertmanager import MAX_INSTANCES, url_problem
from vllm_guardian.config import node_labels


def _matchers_set(match: MatchConfig) -> list[str]:
    return [f.name for f in dataclasses.fields(MatchConfig) if getattr(match, f.name) is not None]


def _check_target(target: TargetConfig, where: str, problems: list[str]) -> None:
    match = target.match
    if isinstance(match, MatchConfig):
        names = [f.name for f in dataclasses.fields(MatchConfig)]
        chosen = _matchers_set(match)
        if len(chosen) != 1:
            got = "none" if not chosen else f"{len(chosen)} ({', '.join(chosen)})"
            problems.append(f"{where}.match: exactly one matcher must be set (one of {', '.join(names)}), got {got}")
        kube = match.kubernetes
        if isinstance(kube, KubernetesMatch):
            if kube.namespace is None and (kube.pod is not None or kube.selector is not None):
                problems.append(
                    f"{where}.match.kubernetes.namespace: required with pod or selector (pods are listed per namespace)"
                )
            elif kube.namespace is None and kube.pod_uid is None:
                problems.append(f"{where}.match.kubernetes: set namespace (with pod or selector), or pod_uid")
    if isinstance(target.api_key_env, str) and isinstance(target.api_key_file, str):
        problems.append(f"{where}: set api_key_env or api_key_file, not both")
    restart = target.restart
    if isinstance(restart, Invalid):
        return
    if restart.mode == "command" and restart.command == ():
        problems.append(f"{where}.restart.command: required (a non-empty argv list) when restart.mode is command")
    if (
        restart.mode == "systemd"
        and restart.unit is None
        and not (isinstance(match, MatchConfig) and match.systemd_unit is not None)
    ):
        problems.append(
            f"{where}.restart.unit: required when restart.mode is systemd (or match the target by match.systemd_unit)"
        )


def _check_alertmanager(cfg: Config, problems: list[str]) -> None:
    alerts = cfg.alerts
    am = None if isinstance(alerts, Invalid) else alerts.alertmanager
    if am is None or isinstance(am, Invalid) or isinstance(am.urls, Invalid):
        return
    if len(am.urls) > MAX_INSTANCES:
        problems.append(f"alerts.alertmanager.urls: at most {MAX_INSTANCES} Alertmanagers, got {len(am.urls)}")
    for i, url in enumerate(am.urls):
        why = url_problem(url) if isinstance(url, str) else ""
        if why:
            problems.append(f"alerts.alertmanager.urls[{i}]: expected {why}, got {show(url)}")


def cross_checks(cfg: Config, problems: list[str]) -> None:
    _check_alertmanager(cfg, problems)
    if isinstance(cfg.node_labels, dict):
        problems.extend(node_labels.problems(cfg.node_labels))
    if isinstance(cfg.state_dir, str) and not cfg.state_dir.strip():
        problems.append(
            f"state_dir: expected a directory path, got {show(cfg.state_dir)} "
            "(the control socket and every state file live there)"
        )
    api = cfg.api
    if not isinstance(api, Invalid) and isinstance(api.web_config_file, str) and api.http is None:
        problems.append("api.web_config_file: set, but api.http is null (the HTTP listener is off)")
    if isinstance(cfg.targets, Invalid):
        return
    first_seen: dict[str, int] = {}
    for i, target in enumerate(cfg.targets):
        if isinstance(target, Invalid):
            continue
        where = f"targets[{i}]"
        name = target.name
        if isinstance(name, str):
            if name in first_seen:
                problems.append(f"{where}.name: duplicate target name {show(name)} (also targets[{first_seen[name]}])")
            else:
                first_seen[name] = i
        _check_target(target, where, problems)

"""Render the Kubernetes manifests with the real tools: ``kubectl kustomize`` for the overlays,
``helm template`` / ``helm lint`` for the chart.

The binaries are the pinned ones ``tools/k8s_tools.sh`` caches in ``build/k8s-tools`` (``make
k8s-tools``; ``K8S_TOOLS_DIR`` points elsewhere). A kubectl that happens to be on PATH is never
used: its version, and the kustomize inside it, would be whatever the machine has.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "vllm-guardian"


class ToolMissing(RuntimeError):
    pass


class ToolFailed(RuntimeError):
    """The tool exited non-zero; the message holds its command line and what it said on stderr."""


def tool(name: str) -> str:
    """The pinned ``kubectl`` or ``helm``; ToolMissing (saying how to get it) when not installed."""
    path = Path(os.environ.get("K8S_TOOLS_DIR") or ROOT / "build" / "k8s-tools") / name
    if not os.access(path, os.X_OK):
        raise ToolMissing(f"{path} is missing: run `make k8s-tools` (tools/k8s_tools.sh fetches the pinned {name})")
    return str(path)


def _run(argv: list[str], timeout: float = 120.0) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, "HOME": "/tmp"})
    if out.returncode != 0:
        raise ToolFailed(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIR``, as objects."""
    return docs(_run([tool("kubectl"), "kustomize", str(directory)]))


def helm_template(
    values: list[Path] | None = None,
    sets: dict[str, str] | None = None,
    release: str = "vllm-guardian",
    namespace: str = "guardian",
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with these values files and ``--set`` pairs, as objects;
    ``kube_version``: the cluster version the chart sees (``--kube-version``; default helm's own)."""
    argv = [tool("helm"), "template", release, str(CHART), "--namespace", namespace]
    if kube_version:
        argv += ["--kube-version", kube_version]
    for path in values or ():
        argv += ["-f", str(path)]
    for key, value in (sets or {}).items():
        argv += ["--set", f"{key}={value}"]
    return docs(_run(argv))


def helm_lint(values: Path | None = None) -> str:
    """``helm lint --strict`` of the chart (with a values file); raises ToolFailed on failure."""
    argv = [tool("helm"), "lint", "--strict", str(CHART)]
    if values is not None:
        argv += ["-f", str(values)]
    return _run(argv)

"""The Helm chart's generated files, from its values.yaml and the guardian's config schema:

- ``values.schema.json``: what helm checks every install, upgrade, lint and template against. The
  chart's own keys are typed from their defaults in values.yaml (free-form maps, such as labels and
  affinity, stay open), a few are narrowed by hand (``OVERRIDES``), and ``config`` is the guardian's
  config schema itself (``vllm_guardian.config.json_schema``): a typo in a config key fails at
  ``helm install``, not in a crash-looping pod.
- ``README.md``: the values table, each key with its type, default and the comment above it in
  values.yaml (as helm-docs does, without a Go tool).

    python -m tools.chart_docs           # rewrite both
    python -m tools.chart_docs --check   # exit 1 when a committed file is not what this writes
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from vllm_guardian.config.json_schema import config_schema

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "vllm-guardian"
# maps whose keys are the user's (labels, selectors, Kubernetes objects passed through as given)
FREE_FORM = {
    "config",
    "nodeSelector",
    "affinity",
    "podAnnotations",
    "podLabels",
    "resources",
    "updateStrategy",
    "annotations",
    "labels",
    "basicAuthUsers",
    "tlsConfig",
    "basicAuth",
}
OVERRIDES: dict[str, dict[str, Any]] = {
    "mode": {"enum": ["observe", "remediate"]},
    "metricsPort": {"type": "integer", "minimum": 1, "maximum": 65535},
    "image.digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "webConfig.tls.clientAuthType": {"enum": ["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]},
    "webConfig.tls.minVersion": {"enum": ["TLS12", "TLS13"]},
    "priorityClass.value": {"type": "integer"},
    "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
    "namespaces": {"type": "array", "items": {"type": "string"}},
    "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
    "envFrom": {"type": "array", "items": {"type": "object"}},
    "extraVolumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
    "extraVolumeMounts": {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}},
    "tolerations": {"type": "array", "items": {"type": "object"}},
    "imagePullSecrets": {"type": "array", "items": {"type": "object"}},
}


def _typed(value: Any, path: str) -> dict[str, Any]:
    if path in OVERRIDES:
        return dict(OVERRIDES[path])
    name = path.rsplit(".", 1)[-1]
    if path == "config":
        schema = config_schema()
        schema.pop("$schema")
        schema.pop("title")
        return schema
    if isinstance(value, dict):
        if name in FREE_FORM:
            return {"type": "object"}
        return {
            "type": "object",
            "properties": {k: _typed(v, f"{path}.{k}" if path else k) for k, v in value.items()},
            "additionalProperties": False,
        }
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    return {}  # null: any value (the template decides)


def values_schema(values: dict[str, Any]) -> dict[str, Any]:
    schema = _typed(values, "")
    return {"$schema": "https://json-schema.org/draft-07/schema#", "title": "vllm-guardian chart values", **schema}


# ------------------------------------------------------------------ the README's values table
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?P<rest>.*)$")


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, its comment) for every key of values.yaml, in file order: the comment lines
    just above it (up to a blank line) and its inline comment."""
    out: list[tuple[str, str]] = []
    above: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            above = []
            continue
        if stripped.startswith("#"):
            if not stripped.lstrip("#").strip().startswith("- ") or not above:
                above.append(stripped.lstrip("#").strip())
            continue
        m = _KEY.match(line)
        if not m:
            above = []
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([k for _, k in stack] + [m.group("key")])
        stack.append((indent, m.group("key")))
        inline = m.group("rest").split(" #", 1)[1].strip() if " #" in m.group("rest") else ""
        out.append((key, " ".join([*above, inline]).strip()))
        above = []
    return out


def _lookup(values: dict[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node[part]
    return node


def readme(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    lines = [
        "# vllm-guardian Helm chart",
        "",
        "One guardian per node that runs vLLM (a DaemonSet): it sees the hangs `/health` misses, captures",
        "evidence, alerts, and in `mode: remediate` drains and restarts a hung vLLM pod by eviction.",
        "",
        "```sh",
        "helm install vllm-guardian deploy/helm/vllm-guardian -n guardian --create-namespace \\",
        "  --set namespaces={llm}      # the namespaces of the vLLM pods it may see",
        "```",
        "",
        "Helm checks every value against `values.schema.json` (the guardian's own config schema under",
        "`config`). This file and the schema are generated from `values.yaml` by `python -m tools.chart_docs`.",
        "",
        "## Values",
        "",
        "| Key | Type | Default | Description |",
        "|---|---|---|---|",
    ]
    for key, comment in documented_keys(values_text):
        if any(part in FREE_FORM for part in key.split(".")[:-1]):
            continue  # inside the guardian's config (docs/configuration.md) or a map passed as given
        value = _lookup(values, key)
        if isinstance(value, dict) and value and key.rsplit(".", 1)[-1] not in FREE_FORM:
            continue  # a section: its keys have rows of their own
        kind = "map" if isinstance(value, dict) else "list" if isinstance(value, list) else type(value).__name__
        if value is None:
            kind = "any"
        default = json.dumps(value, separators=(",", ":")) if key != "config" else "see docs/configuration.md"
        if len(default) > 60:
            default = default[:57] + "..."
        text = comment.replace("|", "\\|") or ("the guardian's configuration" if key == "config" else "")
        lines.append(f"| `{key}` | {kind} | `{default}` | {text} |")
    return "\n".join(lines) + "\n"


def generated() -> dict[Path, str]:
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    schema = values_schema(yaml.safe_load(values_text))
    return {
        CHART / "values.schema.json": json.dumps(schema, indent=2, sort_keys=False) + "\n",
        CHART / "README.md": readme(values_text),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"chart_docs: {', '.join(stale)} not what tools/chart_docs.py writes: run python -m tools.chart_docs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

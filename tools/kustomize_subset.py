"""Render deploy/k8s overlays without the kustomize binary: the subset of kustomize they use.

``python -m tools.kustomize_subset deploy/k8s/overlays/remediate`` prints the multi-document
YAML ``kubectl kustomize`` prints for it (same objects; kustomize's ordering by kind is not
reproduced). CI renders and validates with this because the kustomize binary is on neither
PyPI nor Debian; where ``kubectl`` is installed a test checks that both agree.

Supported, and nothing else (any other key is an error, so the manifests stay within it):
``resources`` (files, or directories holding a kustomization.yaml, never outside the tree),
``configMapGenerator`` (``name``, ``namespace``, ``behavior`` create|replace|merge, ``files``
as ``name`` or ``key=name``, ``literals``), ``generatorOptions.disableNameSuffixHash: true``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"
_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions"}
_GEN_KEYS = {"name", "namespace", "behavior", "files", "literals"}


class RenderError(Exception):
    pass


def _load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _ident(doc: dict) -> tuple[str, str, str]:
    md = doc.get("metadata") or {}
    return doc.get("kind", ""), md.get("namespace", ""), md.get("name", "")


def _generate(gen: dict, root: Path) -> dict:
    unknown = set(gen) - _GEN_KEYS
    if unknown:
        raise RenderError(f"{root}: configMapGenerator keys not supported: {sorted(unknown)}")
    data: dict[str, str] = {}
    for item in gen.get("files") or []:
        key, _, name = item.partition("=") if "=" in item else (Path(item).name, "", item)
        src = (root / name).resolve()
        if root.resolve() not in src.parents:
            raise RenderError(f"{root}: file {name} is outside the kustomization (kustomize refuses it)")
        data[key] = src.read_text(encoding="utf-8")
    for item in gen.get("literals") or []:
        key, _, value = item.partition("=")
        data[key] = value
    md: dict[str, Any] = {"name": gen["name"]}
    if gen.get("namespace"):
        md["namespace"] = gen["namespace"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def render(directory: str | Path, _seen: tuple[Path, ...] = ()) -> list[dict]:
    """The objects a kustomization directory builds to."""
    root = Path(directory).resolve()
    if root in _seen:
        raise RenderError(f"cycle: {root}")
    kust = yaml.safe_load((root / KUSTOMIZATION).read_text(encoding="utf-8")) or {}
    unknown = set(kust) - _KEYS
    if unknown:
        raise RenderError(f"{root / KUSTOMIZATION}: keys not supported by this renderer: {sorted(unknown)}")
    opts = kust.get("generatorOptions") or {}
    if kust.get("configMapGenerator") and opts != {"disableNameSuffixHash": True}:
        raise RenderError(f"{root}: configMapGenerator needs generatorOptions.disableNameSuffixHash: true here")
    docs: list[dict] = []
    for res in kust.get("resources") or []:
        path = (root / res).resolve()
        if path.is_dir():
            docs.extend(render(path, _seen + (root,)))
        else:
            docs.extend(_load_docs(path))
    seen: set[tuple[str, str, str]] = set()
    for d in docs:
        if _ident(d) in seen:
            raise RenderError(f"{root}: {_ident(d)} appears twice")
        seen.add(_ident(d))
    for gen in kust.get("configMapGenerator") or []:
        made = _generate(gen, root)
        behavior = gen.get("behavior", "create")
        hits = [i for i, d in enumerate(docs) if _ident(d) == _ident(made)]
        if behavior == "create":
            if hits:
                raise RenderError(f"{root}: ConfigMap {gen['name']} already exists (use behavior: replace)")
            docs.append(made)
        elif behavior in ("replace", "merge"):
            if not hits:
                raise RenderError(
                    f"{root}: no ConfigMap {gen['name']} in namespace {gen.get('namespace', '')!r} to {behavior}"
                )
            old = docs[hits[0]]
            new = dict(old)
            new["data"] = made["data"] if behavior == "replace" else {**(old.get("data") or {}), **made["data"]}
            docs[hits[0]] = new
        else:
            raise RenderError(f"{root}: behavior {behavior!r} not supported")
    return docs


def render_yaml(directory: str | Path) -> str:
    return yaml.safe_dump_all(render(directory), sort_keys=False, default_flow_style=False)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.kustomize_subset <kustomization dir>")
    sys.stdout.write(render_yaml(sys.argv[1]))

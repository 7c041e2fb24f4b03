"""Layering (docs/design.md, Layering): who may import whom inside the guardian package, checked with ast.

- model / errors / clock import nothing of guardian;
- series / detectors / incidents never import host, probes, daemon or cli (pure, fast to test);
- production code (all but vllm_guardian/testing/, the CLI and the simulator included) never imports
  vllm_guardian.testing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_guardian

PKG_DIR = Path(vllm_guardian.__file__).resolve().parent


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names a module imports (``from X import y`` yields X and X.y: y may be a module)."""
    out: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join(p for p in base_parts if p)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def all_modules() -> dict[str, set[str]]:
    mods = {}
    for path in sorted(PKG_DIR.rglob("*.py")):
        name = module_name(path)
        mods[name] = imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
    return mods


MODULES = all_modules()


# ------------------------------------------------------------------ the resolver itself
@pytest.mark.parametrize(
    "source, module, is_package, expected",
    [
        (
            "from ..model import Kind",
            "vllm_guardian.detectors.busy_loop",
            False,
            {"vllm_guardian.model", "vllm_guardian.model.Kind"},
        ),
        (
            "from . import metrics",
            "vllm_guardian.series",
            True,
            {"vllm_guardian.series", "vllm_guardian.series.metrics"},
        ),
        (
            "from .store import X",
            "vllm_guardian.series",
            True,
            {"vllm_guardian.series.store", "vllm_guardian.series.store.X"},
        ),
        ("import vllm_guardian.host.procfs as p", "vllm_guardian.cli.main", False, {"vllm_guardian.host.procfs"}),
        (
            "from vllm_guardian import testing",
            "vllm_guardian.loop.daemon",
            False,
            {"vllm_guardian", "vllm_guardian.testing"},
        ),
        (
            "def f():\n    from ..testing import clock",
            "vllm_guardian.incidents.manager",
            False,
            {"vllm_guardian.testing", "vllm_guardian.testing.clock"},
        ),
    ],
)
def test_imports_are_resolved_to_absolute_names(source, module, is_package, expected):
    assert imports_of(source, module, is_package) == expected


def test_the_walk_sees_the_package():
    assert {"vllm_guardian.model", "vllm_guardian.series.store", "vllm_guardian.detectors.busy_loop"} <= set(MODULES)


# ------------------------------------------------------------------ the rules
@pytest.mark.parametrize("module", ["vllm_guardian.model", "vllm_guardian.errors", "vllm_guardian.clock"])
def test_vocabulary_modules_import_nothing_of_guardian(module):
    assert sorted(i for i in MODULES[module] if within(i, "vllm_guardian")) == []


PURE = ("vllm_guardian.series", "vllm_guardian.detectors", "vllm_guardian.incidents")
FORBIDDEN_FOR_PURE = (
    "vllm_guardian.host",
    "vllm_guardian.probes",
    "vllm_guardian.loop.daemon",
    "vllm_guardian.cli",
)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if any(within(m, p) for p in PURE)))
def test_pure_layers_never_touch_the_machine(module):
    bad = sorted(i for i in MODULES[module] if any(within(i, f) for f in FORBIDDEN_FOR_PURE))
    assert bad == []


def is_production(module: str) -> bool:
    return not within(module, "vllm_guardian.testing")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if is_production(m)))
def test_production_code_never_imports_the_testing_package(module):
    assert sorted(i for i in MODULES[module] if within(i, "vllm_guardian.testing")) == []

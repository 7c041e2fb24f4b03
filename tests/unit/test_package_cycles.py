"""The wings of the package import one way: no package-level import cycle, and a short hall.

A wing is a direct subpackage of ``vllm_guardian`` (``remediation``, ``loop``, ...) or a module at
its top. An edge A -> B is any import that runs (at module level or inside a function) in a module
of A naming a module of B; imports under ``if TYPE_CHECKING:`` are for annotations only and do not
count. The graph must have no cycle, so each wing can be read, tested and changed knowing only
the wings below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_guardian

PKG_DIR = Path(vllm_guardian.__file__).resolve().parent
PKG = "vllm_guardian"
MAX_TOP_MODULES = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names imported when the code runs (``from X import y`` yields X and X.y)."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()

    def walk(nodes: list[ast.stmt] | list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.orelse)  # the body is for the type checker only
                continue
            if isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                out.add(target)
                out.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
            walk(list(ast.iter_child_nodes(node)))

    walk(list(ast.parse(source).body))
    return out


def wing(module: str) -> str:
    return ".".join(module.split(".")[:2])


def wing_graph() -> dict[str, dict[str, set[str]]]:
    """wing -> wing it imports -> the modules that do it."""
    paths = {module_name(p): p for p in PKG_DIR.rglob("*.py")}
    graph: dict[str, dict[str, set[str]]] = {}
    for mod, path in paths.items():
        for name in runtime_imports(path.read_text(encoding="utf-8"), mod, path.name == "__init__.py"):
            if not name.startswith(PKG + "."):
                continue
            while name not in paths and "." in name:  # X.y where y is a name in module X
                name = name.rpartition(".")[0]
            if name == PKG or wing(name) == wing(mod):
                continue
            graph.setdefault(wing(mod), {}).setdefault(wing(name), set()).add(mod)
    return graph


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components with more than one wing (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


@pytest.mark.parametrize(
    "source, module, expected",
    [
        ("from vllm_guardian.model import Kind", "vllm_guardian.a.b", {"vllm_guardian.model"}),
        ("def f():\n    from vllm_guardian.loop import run\n", "vllm_guardian.a.b", {"vllm_guardian.loop"}),
        ("if TYPE_CHECKING:\n    from vllm_guardian.loop import run\n", "vllm_guardian.a.b", set()),
        ("if typing.TYPE_CHECKING:\n    import vllm_guardian.loop\n", "vllm_guardian.a.b", set()),
        ("from ..model import Kind", "vllm_guardian.a.b", {"vllm_guardian.model"}),
    ],
)
def test_the_walk_counts_runtime_imports_and_skips_those_for_the_type_checker(source, module, expected):
    got = {n for n in runtime_imports(source, module, False) if n.count(".") <= 1}
    assert got == expected


def test_the_walk_finds_a_cycle_between_two_wings():
    assert cycles({"a": {"b": {"a.x"}}, "b": {"a": {"b.y"}}}) == [["a", "b"]]
    assert cycles({"a": {"b": {"a.x"}}, "b": {"c": {"b.y"}}}) == []


def test_no_package_level_import_cycle():
    graph = wing_graph()
    found = cycles(graph)
    detail = [
        f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})"
        for comp in found
        for a in comp
        for b in comp
        if b in graph.get(a, {})
    ]
    assert found == [], "import cycles between wings:\n" + "\n".join(detail)


def test_the_top_of_the_package_holds_at_most_a_dozen_modules():
    top = sorted(p.name for p in PKG_DIR.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top

"""The wings of the package import one way: no import cycle, no arrow back up, and a short hall.

A wing is a direct subpackage of ``vllm_guardian`` (``remediation``, ``loop``, ...) or a module at
its top. An edge A -> B is any import in a module of A naming a module of B: at module level,
inside a function, or under ``if TYPE_CHECKING:`` (a type named for an annotation is a dependency
too: the reader of A must know B). Two graphs must have no cycle: the wings', and the modules'
(inside a wing too). And the wings sit in the rows of ``LAYERS`` (docs/design.md, Layering):
no wing imports a wing of a higher row, so each wing can be read, tested and changed knowing only
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

# The rows of the house, bottom first: a wing imports only wings of its own row or of rows below.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(f"{PKG}.{w}" for w in row.split())
    for row in (
        "model errors clock fsutil netaddr proctree redact vllm_versions store config",  # vocabulary
        "host seams",  # the machine
        "series gates detectors incidents",  # pure judging: windows, the detectors, incidents
        "discovery state",  # what is known: targets, what each probe last read
        "probes",  # seeing
        "bundle diagnosis policy groups sinks",  # telling: evidence, diagnosis, alerts; the policy's rules
        "remediation",  # acting
        "surface",  # status, exporter, control socket, listener
        "loop",  # the daemon and its assembly
        "cli sim",  # the command, the simulated server
        "testing",  # fakes for the tests and the demo
    )
)

# Arrows not yet removed, each with the work that removes it. The list only shrinks.
DEFERRED: dict[tuple[str, str], str] = {
    # status_view reads ~30 paths through `d: Daemon` (a type-level import); the registration
    # protocol of #31 (each part registers its status section) removes it.
    (f"{PKG}.surface.status_view", f"{PKG}.loop.daemon"): "#31 registration protocol",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(source: str, module: str, is_package: bool, *, type_level: bool = True) -> set[str]:
    """Absolute names imported (``from X import y`` yields X and X.y); those under
    ``if TYPE_CHECKING:`` only with ``type_level``."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()

    def walk(nodes: list[ast.stmt] | list[ast.AST]) -> None:
        for node in nodes:
            if not type_level and isinstance(node, ast.If) and _is_type_checking(node.test):
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


Graph = dict[str, dict[str, set[str]]]


def module_graph() -> Graph:
    """module -> guardian module it imports (type-level included) -> {the importer}. A module's
    import of its own package (``__init__``, run first anyway) is not an edge."""
    paths = {module_name(p): p for p in PKG_DIR.rglob("*.py")}
    graph: Graph = {}
    for mod, path in paths.items():
        for name in imported_names(path.read_text(encoding="utf-8"), mod, path.name == "__init__.py"):
            if not name.startswith(PKG + "."):
                continue
            while name not in paths and "." in name:  # X.y where y is a name in module X
                name = name.rpartition(".")[0]
            if name in (PKG, mod) or mod.startswith(name + "."):
                continue
            graph.setdefault(mod, {}).setdefault(name, set()).add(mod)
    return graph


def without_deferred(graph: Graph) -> Graph:
    return {a: {b: m for b, m in out.items() if (a, b) not in DEFERRED} for a, out in graph.items()}


def wing_graph(modules: Graph) -> Graph:
    """wing -> wing it imports -> the modules that do it."""
    graph: Graph = {}
    for mod, out in modules.items():
        for name in out:
            if wing(name) != wing(mod):
                graph.setdefault(wing(mod), {}).setdefault(wing(name), set()).add(mod)
    return graph


def row(w: str) -> int:
    for i, members in enumerate(LAYERS):
        if w in members:
            return i
    raise KeyError(f"{w} is in no row of LAYERS: give the new wing its row")


def back_up_arrows(wings: Graph) -> list[str]:
    """Each import of a wing in a higher row than the importer's."""
    return [
        f"{a} (row {row(a)}) -> {b} (row {row(b)}): {', '.join(sorted(wings[a][b]))}"
        for a in sorted(wings)
        for b in sorted(wings[a])
        if row(b) > row(a)
    ]


def cycles(graph: Graph) -> list[list[str]]:
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


def describe(graph: Graph, found: list[list[str]]) -> str:
    return "\n".join(
        f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})"
        for comp in found
        for a in comp
        for b in comp
        if b in graph.get(a, {})
    )


MODULES = without_deferred(module_graph())


@pytest.mark.parametrize(
    "source, module, type_level, expected",
    [
        ("from vllm_guardian.model import Kind", "vllm_guardian.a.b", True, {"vllm_guardian.model"}),
        ("def f():\n    from vllm_guardian.loop import run\n", "vllm_guardian.a.b", True, {"vllm_guardian.loop"}),
        (
            "if TYPE_CHECKING:\n    from vllm_guardian.loop import run\n",
            "vllm_guardian.a.b",
            True,
            {"vllm_guardian.loop"},
        ),
        ("if TYPE_CHECKING:\n    from vllm_guardian.loop import run\n", "vllm_guardian.a.b", False, set()),
        (
            "if typing.TYPE_CHECKING:\n    import vllm_guardian.loop\n",
            "vllm_guardian.a.b",
            True,
            {"vllm_guardian.loop"},
        ),
        ("if typing.TYPE_CHECKING:\n    import vllm_guardian.loop\n", "vllm_guardian.a.b", False, set()),
        ("from ..model import Kind", "vllm_guardian.a.b", True, {"vllm_guardian.model"}),
    ],
)
def test_the_walk_counts_imports_for_the_type_checker_too(source, module, type_level, expected):
    got = {n for n in imported_names(source, module, False, type_level=type_level) if n.count(".") <= 1}
    assert got == expected


def test_the_walk_finds_a_cycle_between_two_wings():
    assert cycles({"a": {"b": {"a.x"}}, "b": {"a": {"b.y"}}}) == [["a", "b"]]
    assert cycles({"a": {"b": {"a.x"}}, "b": {"c": {"b.y"}}}) == []


def test_an_import_of_a_higher_row_is_an_arrow_back_up():
    low, high = sorted(LAYERS[0])[0], sorted(LAYERS[-1])[0]
    assert back_up_arrows({low: {high: {low + ".x"}}}) == [f"{low} (row 0) -> {high} (row {len(LAYERS) - 1}): {low}.x"]
    assert back_up_arrows({high: {low: {high + ".y"}}}) == []


def test_every_wing_has_its_row():
    wings = {wing(m) for m in module_graph()} | {wing(module_name(p)) for p in PKG_DIR.rglob("*.py")} - {PKG}
    assert sorted(w for w in wings if not any(w in r for r in LAYERS)) == []


def test_no_import_cycle_between_wings():
    graph = wing_graph(MODULES)
    found = cycles(graph)
    assert found == [], "import cycles between wings:\n" + describe(graph, found)


def test_no_import_cycle_between_modules():
    found = cycles(MODULES)
    assert found == [], "import cycles between modules:\n" + describe(MODULES, found)


def test_no_wing_imports_a_wing_of_a_higher_row():
    assert back_up_arrows(wing_graph(MODULES)) == []


def test_every_deferred_arrow_is_still_there():
    """A deferred arrow that is gone leaves the list (it only shrinks)."""
    graph = module_graph()
    assert sorted(k for k in DEFERRED if k[1] not in graph.get(k[0], {})) == []


def test_the_top_of_the_package_holds_at_most_a_dozen_modules():
    top = sorted(p.name for p in PKG_DIR.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top

"""docs/security.md is the threat model: one row per input surface (who can write it, the most it
may cause, its bounds, the modules that read it, the tests that prove it). This keeps it complete
and true: a module that touches outside input must be named in a row (or be listed below with the
reason it reads none), every module and test a row names must exist, and every row names a test.

"Touches outside input" is read from the code, not declared: a module imports an OS-contact library
(socket, subprocess, http, urllib, ssl, redis, psutil, pynvml …), or calls a reading primitive
(open, read_text, listdir, recv, accept, Redis reads, YAML loads, os.environ), or calls a read of one
of the guardian's seams (the HTTP client, /proc, the command runner, the Kubernetes client, an
accelerator backend, a Redis connection). Test equipment (sim/, testing/) is not the product.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "vllm_guardian"
TABLE = ROOT / "docs" / "security.md"

_LIBS = {"socket", "subprocess", "urllib", "http", "socketserver", "redis", "psutil", "pynvml", "ssl", "selectors"}
_READS = {
    "open", "read_text", "read_bytes", "readlink", "listdir", "scandir", "iterdir", "recv", "recv_into", "accept",
    "xread", "xreadgroup", "xrange", "xrevrange", "hget", "hgetall", "hmget", "hscan", "hscan_iter", "get_message",
    "lrange", "smembers", "zrange", "safe_load", "getenv",
}  # fmt: skip
_SEAMS = ("http", "proc", "runner", "kube", "backend", "redis", "conn", "client")
_SEAM_READS = {
    "text", "json", "request", "run", "read", "cmdline", "environ_var", "stat", "status", "listening_ports",
    "socket_inodes", "thread_stack", "thread_syscall", "thread_stat", "thread_io", "thread_schedstat", "cgroup",
    "read_log", "read_node", "find_pod", "pids", "tids",
}  # fmt: skip

# Modules that touch the OS but take no input from outside the guardian, and why.
NO_OUTSIDE_INPUT = {
    "cli/common.py": "reads GUARDIAN_* of the operator's own shell to find the config (the operator's input)",
    "cli/main.py": "opens the output file the operator named on the command line",
    "cli/incidents.py": "lists the guardian's own incident folders for the operator (state dir row covers the files)",
    "fsutil.py": "the atomic-write and bounded-read helpers the rows' modules call",
    "diagnosis/report_html.py": "reads the guardian's own packaged page assets",
    "surface/sdnotify.py": "writes READY/WATCHDOG to systemd's NOTIFY_SOCKET; reads nothing",
}


def _recv(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def outside_contacts(source: str) -> set[str]:
    """What in a module's code touches outside input (empty: nothing does)."""
    found: set[str] = set()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            found |= {f"import {a.name}" for a in n.names if a.name.split(".")[0] in _LIBS}
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and n.module.split(".")[0] in _LIBS:
            found.add(f"from {n.module}")
        elif isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id in _READS:
                found.add(f"{f.id}()")
            elif isinstance(f, ast.Attribute) and f.attr in _READS:
                found.add(f".{f.attr}()")
            elif (
                isinstance(f, ast.Attribute)
                and f.attr in _SEAM_READS
                and any(s in _recv(f.value).lower() for s in _SEAMS)
            ):
                found.add(f"{_recv(f.value)}.{f.attr}()")
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "environ":
            found.add("os.environ[]")
    return found


@functools.cache
def product_modules() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.split("/")[0] in {"sim", "testing"}:
            continue
        contacts = outside_contacts(path.read_text(encoding="utf-8"))
        if contacts:
            out[rel] = contacts
    return out


@dataclass(frozen=True)
class Row:
    surface: str
    writer: str
    worst: str
    bounds: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]


_CODE = re.compile(r"`([^`]+)`")


def table_rows() -> list[Row]:
    rows: list[Row] = []
    in_table = False
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| Surface |"):
            in_table = True
            continue
        if not in_table or not line.startswith("|"):
            in_table = in_table and line.startswith("|")
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-", ":"}:
            continue
        assert len(cells) == 6, f"docs/security.md: a row has {len(cells)} cells, not 6: {line[:80]}"
        mods = tuple(m for m in _CODE.findall(cells[4]) if m.endswith(".py"))
        tests = tuple(t for t in _CODE.findall(cells[5]) if t.startswith("tests/"))
        rows.append(Row(cells[0], cells[1], cells[2], cells[3], mods, tests))
    return rows


ROWS = table_rows()
NAMED = {m for r in ROWS for m in r.modules}


def test_the_table_has_a_row_per_surface():
    assert len(ROWS) >= 15
    assert len({r.surface for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("module", sorted(product_modules()))
def test_every_module_that_reads_outside_input_is_in_the_table(module):
    contacts = product_modules()[module]
    assert module in NAMED or module in NO_OUTSIDE_INPUT, (
        f"vllm_guardian/{module} touches outside input ({', '.join(sorted(contacts))}) but no row of "
        "docs/security.md names it: add it to its surface's row (who can write it, the most it may cause, "
        "its bounds, the hostile test), or to NO_OUTSIDE_INPUT here with the reason it reads none"
    )


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.surface[:40])
def test_every_row_is_filled_and_names_what_exists(row):
    assert row.writer and row.worst and row.bounds, row
    assert row.modules, f"{row.surface}: names no module"
    assert row.tests, f"{row.surface}: names no test"
    for m in row.modules:
        assert (PKG / m).is_file(), f"{row.surface}: vllm_guardian/{m} does not exist"
    for t in row.tests:
        path = t.split("::")[0]
        assert (ROOT / path).is_file(), f"{row.surface}: {path} does not exist"
        if "::" in t:
            name = t.split("::")[1].split("[")[0]
            assert re.search(rf"def {re.escape(name)}\b", (ROOT / path).read_text(encoding="utf-8")), t


def test_the_exemptions_are_still_true():
    found = product_modules()
    for module in NO_OUTSIDE_INPUT:
        assert module in found, f"{module} no longer touches the OS: drop it from NO_OUTSIDE_INPUT"
        assert module not in NAMED, f"{module} is both exempt and in a row"


@pytest.mark.parametrize(
    "source, touches",
    [
        ("import subprocess\n", True),
        ("from redis import Redis\n", True),
        ("def f(p):\n    return p.read_text()\n", True),
        ("def f(self):\n    return self.http.request('GET', '/metrics')\n", True),
        ("def f(r):\n    return r.hgetall('k')\n", True),
        ("import os\nx = os.environ['HOME']\n", True),
        ("def f(d):\n    return d.get('k')\n", False),
        ("import json\nx = json.loads('{}')\n", False),
    ],
)
def test_the_scan_recognises_outside_contact(source, touches):
    assert bool(outside_contacts(source)) is touches

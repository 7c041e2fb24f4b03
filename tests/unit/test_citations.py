"""Comments and docs cite only what a reader of this repository can open.

The design is written down in docs/design.md; a pointer goes there (by section name), never to a
document outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("vllm_guardian", "tests", "benchmarks", "docs", "deploy", "configs")
FILES = ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml", ".ci/run")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".service", ".txt", ""}
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            r"\bSPEC" + r"(\.md|\s*§)",
            r"\bDESIGN" + r"(\.md|\s+principle|\s+\")",
            r"\.\./" + r"shared",
            r"\breference/" + r"(probes|vllm|real-vllm)",
            r"\bprobes" + r"\.md\b",
        ]
    )
)


def _texts():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                yield path
    for name in FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def test_no_file_cites_a_document_outside_the_repository():
    found = []
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert found == [], "cite docs/design.md (a section name) instead:\n" + "\n".join(found)


def test_the_design_document_exists_with_the_sections_the_code_points_to():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    headings = {h.strip() for h in re.findall(r"^#+ (.+)$", design, re.M)}
    pointed: set[str] = set()
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        pointed.update(m.strip() for m in re.findall(r"docs/design\.md, ([A-Z][\w :]+?)[)\]\"]", text))
    assert pointed, "nothing points into docs/design.md"
    assert pointed <= headings, f"pointers to sections docs/design.md does not have: {sorted(pointed - headings)}"

"""README.md is the front door: what the guardian is, the two commands, a short summary of each
part and an index of docs/. It stays short enough to read in one sitting (at most 300 lines, no
prose line over 400 characters); the detail lives in docs/ and CONTRIBUTING.md, and every file of
docs/ is in the docs index (docs/README.md, one line each, linked from the README), so nothing
written there is out of a reader's reach.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS_INDEX = ROOT / "docs" / "README.md"
MAX_LINES = 300
MAX_PROSE_LINE = 400


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, in_code = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            out.append((n, line))
    return out


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_no_readme_line_outside_code_blocks_is_over_400_characters():
    lines = prose_lines(README.read_text(encoding="utf-8"))
    assert [f"line {n}: {len(line)} characters" for n, line in lines if len(line) > MAX_PROSE_LINE] == []


def test_the_line_reader_skips_code_blocks():
    text = "a\n```sh\n" + "x" * 500 + "\n```\nb\n"
    assert prose_lines(text) == [(1, "a"), (5, "b")]


def test_the_readme_links_the_docs_index():
    text = README.read_text(encoding="utf-8")
    assert "\n## Docs\n" in text, "README.md has no '## Docs' section"
    assert "](docs/README.md)" in text.split("\n## Docs\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_index_links_every_file_and_folder_of_docs_one_line_each():
    text = DOCS_INDEX.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.startswith("- [")]
    linked = [link for line in lines for link in re.findall(r"\]\(([^)#]+)\)", line)[:1]]
    present = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    present |= {f"{p.name}/" for p in (ROOT / "docs").iterdir() if p.is_dir()}
    assert sorted(present - set(linked)) == []
    assert len(linked) == len(set(linked)), "a page is listed twice"


def test_the_readme_points_to_the_guide_for_contributors():
    assert "](CONTRIBUTING.md)" in README.read_text(encoding="utf-8")
    assert (ROOT / "CONTRIBUTING.md").is_file()

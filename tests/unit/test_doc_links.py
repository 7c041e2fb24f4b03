"""Every relative link of the docs resolves: README.md, CONTRIBUTING.md, docs/ and docs/runbooks/.

A link is ``[text](target)`` outside code blocks and code spans. A target that is not a URL must
name a file or folder of the repository, relative to the document; its ``#anchor``, when it has
one, must be a heading of the file it names (or of the document itself, for ``#anchor`` alone),
spelled as GitHub spells heading anchors: lower case, punctuation but ``-`` and ``_`` dropped,
each space a ``-``, a repeated heading given ``-1``, ``-2``. Moving a section breaks its links
here, not in a reader's browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docs" / "runbooks").glob("*.md"),
    ]
)
IDS = [str(p.relative_to(ROOT)) for p in DOCS]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (a link's text, a code span's content) lowered,
    every character but letters, digits, ``-``, ``_`` and spaces dropped, spaces made ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path: Path) -> list[str]:
    prose = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(prose) if not EXTERNAL.match(t)]


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and (dest.is_dir() or dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=IDS)
def test_every_relative_link_names_a_file_and_heading_that_exist(path):
    assert broken(path) == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Errors and exit codes", "errors-and-exit-codes"),
        ("`busy_loop`", "busy_loop"),
        ("Several API servers (`--api-server-count N`)", "several-api-servers---api-server-count-n"),
        ("Trust on the host: sockets, keys, redaction, text", "trust-on-the-host-sockets-keys-redaction-text"),
        ('Why "CPU demand" and not just CPU', "why-cpu-demand-and-not-just-cpu"),
        (
            "Data parallel (`make bench`, [benchmarks/dp.md](../benchmarks/dp.md))",
            "data-parallel-make-bench-benchmarksdpmd",
        ),
        (
            "Startup grace and readiness: warm is what the server says",
            "startup-grace-and-readiness-warm-is-what-the-server-says",
        ),
        ("Remediation — the sequence", "remediation--the-sequence"),
    ],
)
def test_a_heading_is_anchored_as_github_spells_it(heading, anchor):
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# Cost\n\n## Cost\n\n```\n# Cost in a code block\n```\n", encoding="utf-8")
    assert anchors(doc) == {"cost", "cost-1"}


def test_a_broken_file_or_anchor_is_reported_and_code_is_not_read_as_a_link(tmp_path):
    (tmp_path / "other.md").write_text("# Here\n", encoding="utf-8")
    doc = tmp_path / "d.md"
    doc.write_text(
        "# Top\n\n[ok](other.md#here) [self](#top) [web](https://example.com/x#y) [gone](missing.md)\n"
        "[bad](other.md#there) `[not](a-link.md)`\n\n```\n[nor](this.md)\n```\n",
        encoding="utf-8",
    )
    assert [b.split(":")[0] for b in broken(doc)] == ["missing.md", "other.md#there"]

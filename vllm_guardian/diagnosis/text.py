"""The diagnosis in words: the block summary.txt and ``guardian incidents show`` print (pure)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vllm_guardian.diagnosis.forensics import crash_headline

MATCHED_SHOWN = 6


def diagnosis_lines(
    diagnosis: Sequence[Mapping[str, Any]], crash: Mapping[str, Any] | None = None, notes: Sequence[str] = ()
) -> list[str]:
    lines: list[str] = []
    if diagnosis:
        top = diagnosis[0]
        lines.append(
            f"Diagnosis: {top.get('title')} [{top.get('id')}, confidence {float(top.get('confidence', 0)):.2f}]"
        )
        for m in list(top.get("matched") or ())[:MATCHED_SHOWN]:
            lines.append(f"  matched: {m}")
        if top.get("workaround"):
            lines.append(f"  workaround: {top['workaround']}")
        if top.get("advice"):
            lines.append(f"  what to do: {top['advice']}")
        if top.get("fixed_in"):
            lines.append(f"  fixed in: vLLM {top['fixed_in']}")
        for n in top.get("notes") or ():
            lines.append(f"  note: {n}")
        refs = list(top.get("references") or ())
        if refs:
            lines.append("  references: " + ", ".join(refs))
        for o in diagnosis[1:3]:
            lines.append(f"  also possible: {o.get('title')} [{o.get('id')}, {float(o.get('confidence', 0)):.2f}]")
    else:
        lines.append("Diagnosis: no known signature matched")
    for n in notes:
        lines.append(f"Note: {n}")
    if crash:
        lines.append(
            f"Crash: {crash_headline(dict(crash))}" + (f"  [from {crash['source']}]" if crash.get("source") else "")
        )
    return lines


def insert_into_summary(summary: str, block: Sequence[str]) -> str:
    """The block after the summary's header paragraph (the first blank line), so it is read first."""
    head, sep, rest = summary.partition("\n\n")
    if not sep:
        return summary.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    return head + "\n\n" + "\n".join(block) + "\n\n" + rest

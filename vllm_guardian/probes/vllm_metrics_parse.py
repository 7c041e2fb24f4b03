"""Pure parser: a vLLM ``/metrics`` page (Prometheus text) → the numbers the guardian watches.

Finds the watched sample lines with ``str.find`` and reads their values (the
rest of a ~50 KB page is never split into lines nor parsed). Tolerates what changes across vLLM
versions (docs/design.md, Seeing: the probes): a metric that is absent is absent in
the result (never 0); ``vllm:gpu_cache_usage_perc`` (≤ 0.11) stands in for
``vllm:kv_cache_usage_perc``. Values are summed over engines (data parallel),
except the KV usage, which is the highest engine's. Given an ``engines`` dict, the parse also
fills it with each engine's own progress counters and request gauges (vLLM labels them
``engine="0"``, ``"1"`` …), so one rank of a data-parallel server that stops while the other
serves can be judged on its own.
"""

from __future__ import annotations

import re
from typing import Iterator

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.series import metrics as m

# exposed sample name → (our series name, how to combine across label sets)
_SUM = "sum"
_MAX = "max"
WATCHED: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": (m.REQ_RUNNING, _SUM),
    "vllm:num_requests_waiting": (m.REQ_WAITING, _SUM),
    "vllm:kv_cache_usage_perc": (m.KV_USAGE, _MAX),
    "vllm:iteration_tokens_total_count": (m.ITERATIONS, _SUM),
    "vllm:generation_tokens_total": (m.GEN_TOKENS, _SUM),
    "vllm:prompt_tokens_total": (m.PROMPT_TOKENS, _SUM),
    "vllm:num_preemptions_total": (m.PREEMPTIONS, _SUM),
    "vllm:request_success_total": (m.SUCCESS, _SUM),
}
LEGACY: dict[str, str] = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}


CHECK_LINES = 20
# name, optional {labels}, value, optional timestamp: the shape of every exposition sample line
_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?[ \t]+\S+([ \t]+-?\d+)?[ \t]*$")
# what follows a watched sample's name on its line: {labels}, the value, an optional timestamp
_REST = re.compile(r"(\{.*\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")
_NAMES = (*WATCHED, *LEGACY)
# a watched name at a line start, followed by its labels or the value (not a longer name)
_WATCHED_LINE = re.compile(
    r"\n(" + "|".join(re.escape(n) for n in sorted(_NAMES, key=len, reverse=True)) + r")(?=[{ \t])"
)


def _check_head(text: str) -> None:
    """The page's head proves it is exposition text: its first sample lines must look like samples."""
    checked = 0
    lines = text.split("\n", 10 * CHECK_LINES)
    for n, line in enumerate(lines[:-1], 1):
        if line and not line.startswith("#"):
            if not _SAMPLE.match(line):
                raise ProbeFailed(f"unparsable /metrics page: line {n} is not a sample: {line[:80]!r}")
            checked += 1
            if checked >= CHECK_LINES:
                return


_ENGINE = re.compile(r'engine="(\d+)"')
PER_ENGINE = frozenset(
    {m.REQ_RUNNING, m.REQ_WAITING, m.ITERATIONS, m.GEN_TOKENS, m.PROMPT_TOKENS, m.SUCCESS}
)  # what progress and pending work are judged on, per engine


def _watched_samples(text: str) -> Iterator[tuple[str, str, str]]:
    """``(sample name, value text)`` of every line of a watched sample.

    A real vLLM page is ~50 KB and the guardian reads it every second; the samples it watches
    are a dozen lines. One regex search finds them at line starts (a C-speed scan for the
    literal prefix, a newline and ``vllm:``: no per-line Python loop, no general parser); a watched line
    that is not a well-formed sample refuses the page, as a full parser would.
    """
    padded = "\n" + text
    for match in _WATCHED_LINE.finditer(padded):
        end = padded.find("\n", match.end())
        if end < 0:
            end = len(padded)
        rest = _REST.fullmatch(padded, match.end(), end)
        if rest is None:
            raise ProbeFailed(f"unparsable /metrics page: {padded[match.start() + 1 : end][:80]!r}")
        yield match.group(1), rest.group(2), rest.group(1) or ""


def parse_vllm_metrics(text: str, engines: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Return ``{series name: value}`` for the watched metrics present in ``text``; ``engines``,
    when given, gets ``{engine label: {series name: value}}`` of ``PER_ENGINE`` series.

    Raises ``ProbeFailed`` for a page that is not Prometheus text (HTML, truncated
    mid-line, binary) or whose watched lines are not samples.
    """
    stripped = text.lstrip()
    if not stripped:
        raise ProbeFailed("empty /metrics page")
    if stripped.startswith("<"):
        raise ProbeFailed("/metrics returned HTML, not Prometheus text")
    if not text.endswith("\n"):
        # The exposition format ends every line with \n; a page without it was cut short.
        raise ProbeFailed("/metrics page is truncated (no final newline)")
    _check_head(text)
    found: dict[str, list[float]] = {}
    for name, raw, labels in _watched_samples(text):
        try:
            value = float(raw)
        except ValueError:
            raise ProbeFailed(f"unparsable /metrics page: {name} has value {raw[:40]!r}") from None
        found.setdefault(LEGACY.get(name, name), []).append(value)
        series = WATCHED[LEGACY.get(name, name)][0]
        if engines is not None and series in PER_ENGINE and (e := _ENGINE.search(labels)):
            per = engines.setdefault(e.group(1), {})
            per[series] = per.get(series, 0.0) + value  # one engine's labels may split a family
    out: dict[str, float] = {}
    for name, values in found.items():
        series, how = WATCHED[name]
        out[series] = max(values) if how == _MAX else sum(values)
    return out

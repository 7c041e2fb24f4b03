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

Bounded against a broken or hostile page (docs/design.md, Seeing: the probes): an engine label is
a data-parallel rank, so only ``"0"`` … ``"<max_engines - 1>"`` (written as vLLM writes them) are
kept one by one; any other label is dropped and counted (its samples still count in the whole
server's numbers). At most ``SAMPLES_PER_ENGINE`` watched lines per engine are read: a page with
more is refused (``PageRefused``), so the work per page stays bounded whatever it names (a real
vLLM writes ~11 per engine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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


_ENGINE = re.compile(r'[{,][ \t]*engine="([^"\\]*)"')
MAX_ENGINES = 64  # engines kept one by one (probes.vllm_http.max_engines)
SAMPLES_PER_ENGINE = 32  # watched lines read per engine before a page is refused (vLLM writes ~11)
_RANK_DIGITS = 6
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


class PageRefused(ProbeFailed):
    """A page refused for its size (``reason``: ``too_many_samples``, ``page_too_large``): counted
    under that reason, unlike a page that is simply not Prometheus text."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class MetricsPage:
    """What one page says: the whole server's numbers, each kept engine's own, and how many
    engine labels were dropped."""

    values: dict[str, float]  # series name -> value, summed (or the max) over every label set
    engines: dict[str, dict[str, float]] = field(default_factory=dict)  # rank label -> PER_ENGINE values
    engines_dropped: int = 0  # distinct engine labels that are no rank below max_engines


def is_rank(label: str, max_engines: int) -> bool:
    """An engine label as vLLM writes a data-parallel rank below ``max_engines`` (``"0"``, ``"7"``;
    not ``"07"``, ``"+7"`` nor other digits than ASCII)."""
    return (
        0 < len(label) <= _RANK_DIGITS
        and label.isascii()
        and label.isdigit()
        and (label == "0" or label[0] != "0")
        and int(label) < max_engines
    )


def read_page(text: str, max_engines: int = MAX_ENGINES) -> MetricsPage:
    """The watched numbers of ``text``, the whole server's and each kept engine's.

    Raises ``ProbeFailed`` for a page that is not Prometheus text (HTML, truncated mid-line,
    binary) or whose watched lines are not samples, ``PageRefused`` for one with more than
    ``SAMPLES_PER_ENGINE`` watched lines per engine kept.
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
    most = SAMPLES_PER_ENGINE * max(1, max_engines)
    found: dict[str, list[float]] = {}
    engines: dict[str, dict[str, float]] = {}
    dropped: set[str] = set()
    for n, (name, raw, labels) in enumerate(_watched_samples(text), 1):
        if n > most:
            raise PageRefused(
                "too_many_samples",
                f"/metrics page refused: more than {most} samples of the watched metrics "
                f"({SAMPLES_PER_ENGINE} per engine, probes.vllm_http.max_engines {max_engines})",
            )
        try:
            value = float(raw)
        except ValueError:
            raise ProbeFailed(f"unparsable /metrics page: {name} has value {raw[:40]!r}") from None
        found.setdefault(LEGACY.get(name, name), []).append(value)
        series = WATCHED[LEGACY.get(name, name)][0]
        if series in PER_ENGINE and (e := _ENGINE.search(labels)):
            label = e.group(1)
            if not is_rank(label, max_engines):
                dropped.add(label)
                continue
            per = engines.setdefault(label, {})
            per[series] = per.get(series, 0.0) + value  # one engine's labels may split a family
    out: dict[str, float] = {}
    for name, values in found.items():
        series, how = WATCHED[name]
        out[series] = max(values) if how == _MAX else sum(values)
    return MetricsPage(out, engines, len(dropped))


def parse_vllm_metrics(text: str, max_engines: int = MAX_ENGINES) -> dict[str, float]:
    """The whole server's numbers of ``text`` (``read_page(...).values``): ``{series name: value}``
    for the watched metrics present."""
    return read_page(text, max_engines).values

"""Pure parser: a vLLM ``/metrics`` page (Prometheus text) → the numbers the guardian watches.

Reads with prometheus_client's text parser. Tolerates what changes across vLLM
versions (docs/design.md, Seeing: the probes): a metric that is absent is absent in
the result (never 0); ``vllm:gpu_cache_usage_perc`` (≤ 0.11) stands in for
``vllm:kv_cache_usage_perc``. Values are summed over engines (data parallel),
except the KV usage, which is the highest engine's.
"""
from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from ..errors import ProbeFailed
from ..series import metrics as m

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


_FAMILIES = tuple(sorted({n.rsplit("_count", 1)[0] if n.endswith("_count") else n
                          for n in (*WATCHED, *LEGACY)}))


CHECK_LINES = 20
# name, optional {labels}, value, optional timestamp: the shape of every exposition sample line
_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?[ \t]+\S+([ \t]+-?\d+)?[ \t]*$")


def _watched_lines(text: str) -> str:
    """Only the lines of the watched families (and their HELP/TYPE comments).

    A real vLLM page is ~50 KB; prometheus_client's parser costs ~14 ms of CPU on it, which at
    1 Hz is most of the guardian's own CPU. The families we read are a few dozen lines.
    A line that names no watched family cannot change the result, so it is skipped unparsed.
    """
    keep = []
    checked = 0
    for n, line in enumerate(text.splitlines(), 1):
        if checked < CHECK_LINES and line and not line.startswith("#"):
            checked += 1  # the page's head proves it is exposition text; the kept lines are parsed
            if not _SAMPLE.match(line):
                raise ProbeFailed(f"unparsable /metrics page: line {n} is not a sample: {line[:80]!r}")
        body = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if body.startswith("vllm:") and body.startswith(_FAMILIES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Return ``{series name: value}`` for the watched metrics present in ``text``.

    Raises ``ProbeFailed`` for a page that is not Prometheus text (HTML, truncated
    mid-line, binary).
    """
    stripped = text.lstrip()
    if not stripped:
        raise ProbeFailed("empty /metrics page")
    if stripped.startswith("<"):
        raise ProbeFailed("/metrics returned HTML, not Prometheus text")
    if not text.endswith("\n"):
        # The exposition format ends every line with \n; a page without it was cut short.
        raise ProbeFailed("/metrics page is truncated (no final newline)")
    found: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(_watched_lines(text)):
            for sample in family.samples:
                name = LEGACY.get(sample.name, sample.name)
                if name in WATCHED:
                    found.setdefault(name, []).append(float(sample.value))
    except Exception as e:  # noqa: BLE001 - the parser raises bare ValueError/TypeError/IndexError on garbage
        raise ProbeFailed(f"unparsable /metrics page: {type(e).__name__}: {e}") from None
    out: dict[str, float] = {}
    for name, values in found.items():
        series, how = WATCHED[name]
        out[series] = max(values) if how == _MAX else sum(values)
    return out

"""A broken or hostile server's ``/metrics``: engine labels never seen before, on every page.

vLLM labels each engine of a data-parallel server ``engine="<rank>"``; a server (or a proxy in
front of one) that names thousands of new ones per scrape is what the guardian must bound
(``--flood-engines N``: each page appends ``N`` engines numbered on from the last page's, each
with a request gauge and a step counter, ~150 bytes per engine). Pure: numbers in, text out.
"""

from __future__ import annotations


def engine_flood(first: int, count: int, model: str) -> str:
    """``count`` engines from label ``first`` on: two watched samples each."""
    return "".join(
        f'vllm:num_requests_running{{engine="{k}",model_name="{model}"}} 0.0\n'
        f'vllm:iteration_tokens_total_count{{engine="{k}",model_name="{model}"}} 1.0\n'
        for k in range(first, first + count)
    )

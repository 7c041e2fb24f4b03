"""The rest of a real vLLM /metrics page: the families the guardian does not watch.

A vLLM 0.32 server exposes ~50 KB of exposition text: per-request latency and size
histograms (many buckets each), prefix-cache and token-source counters, the
HTTP instrumentator's per-handler series, and the Python process collectors. The
simulator's own scheduler families are a few KB; ``--full-metrics`` appends this
block so that benchmarks pay the real price of reading a page. Pure: text in, text
out; counts move with the server's request count so the page is not constant.
"""

from __future__ import annotations

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
_LATENCY_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request."),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
)
_SIZE_HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:request_generation_tokens", "Number of generation tokens processed."),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens."),
    ("vllm:request_params_n", "Histogram of the n request parameter."),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill."),
    ("vllm:request_num_preemptions", "Number of preemptions per request."),
)
_COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local prefix cache hits)."),
)
_HANDLERS = ("/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/version")
_HTTP_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)


def _g(x: float) -> str:
    return repr(float(x))


def _histogram(out: list[str], name: str, doc: str, labels: str, bounds, n: int) -> None:
    out.append(f"# HELP {name} {doc}")
    out.append(f"# TYPE {name} histogram")
    for i, b in enumerate(bounds):
        out.append(f'{name}_bucket{{{labels},le="{_g(b)}"}} {_g(n * (i + 1) // len(bounds))}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {_g(n)}')
    out.append(f"{name}_count{{{labels}}} {_g(n)}")
    out.append(f"{name}_sum{{{labels}}} {_g(n * 0.37)}")
    out.append(f"{name}_created{{{labels}}} 1.7e+09")


def full_page_tail(model: str, requests: int) -> str:
    """The unwatched families of a vLLM 0.32 page, with counts that follow ``requests``."""
    labels = f'engine="0",model_name="{model}"'
    out: list[str] = []
    for name, doc in _LATENCY_HISTOGRAMS:
        _histogram(out, name, doc, labels, _LATENCY_BUCKETS, requests)
    for name, doc in _SIZE_HISTOGRAMS:
        _histogram(out, name, doc, labels, _SIZE_BUCKETS, requests)
    for name, doc in _COUNTERS:
        out.append(f"# HELP {name}_total {doc}")
        out.append(f"# TYPE {name}_total counter")
        out.append(f"{name}_total{{{labels}}} {_g(requests * 7)}")
        out.append(f"{name}_created{{{labels}}} 1.7e+09")
    out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append(
        f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",{labels},enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="4096",swap_space="4"} 1.0'
    )
    out.append("# HELP http_requests_total Total number of requests by method, status and handler.")
    out.append("# TYPE http_requests_total counter")
    for h in _HANDLERS:
        for status in ("2xx", "4xx", "5xx"):
            out.append(f'http_requests_total{{handler="{h}",method="GET",status="{status}"}} {_g(requests)}')
    for family, bounds in (
        ("http_request_duration_highr_seconds", _HTTP_BUCKETS),
        ("http_request_duration_seconds", (0.1, 0.5, 1.0)),
    ):
        out.append(f"# HELP {family} Latency with many buckets but no API specific labels.")
        out.append(f"# TYPE {family} histogram")
        for h in _HANDLERS:
            hl = f'handler="{h}",method="GET"'
            for i, b in enumerate(bounds):
                out.append(f'{family}_bucket{{{hl},le="{_g(b)}"}} {_g(requests * (i + 1) // len(bounds))}')
            out.append(f'{family}_bucket{{{hl},le="+Inf"}} {_g(requests)}')
            out.append(f"{family}_count{{{hl}}} {_g(requests)}")
            out.append(f"{family}_sum{{{hl}}} {_g(requests * 0.004)}")
    for family in ("http_request_size_bytes", "http_response_size_bytes"):
        out.append(f"# HELP {family} Content length of incoming requests by handler.")
        out.append(f"# TYPE {family} summary")
        for h in _HANDLERS:
            out.append(f'{family}_count{{handler="{h}"}} {_g(requests)}')
            out.append(f'{family}_sum{{handler="{h}"}} {_g(requests * 312)}')
    for gen in range(3):
        for what in ("objects_collected", "objects_uncollectable", "collections"):
            out.append(f'python_gc_{what}_total{{generation="{gen}"}} {_g(requests * (3 - gen))}')
    out.append('python_info{implementation="CPython",major="3",minor="12",patchlevel="3",version="3.12.3"} 1.0')
    for what, v in (
        ("virtual_memory_bytes", 3.2e10),
        ("resident_memory_bytes", 2.1e9),
        ("start_time_seconds", 1.7e9),
        ("cpu_seconds_total", 812.5),
        ("open_fds", 211),
        ("max_fds", 1048576),
    ):
        out.append(f"process_{what} {_g(v)}")
    return "\n".join(out) + "\n"

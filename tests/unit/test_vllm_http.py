"""The vllm_http probe and its /metrics parser: what an SRE's vLLM actually serves."""

from pathlib import Path

import pytest

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.http import HttpError
from vllm_guardian.probes.vllm_http import scrape
from vllm_guardian.probes.vllm_metrics_parse import PageRefused, is_rank, parse_vllm_metrics, read_page
from vllm_guardian.series import metrics as m
from vllm_guardian.testing.fake_http import FakeHttp, ok

FIX = Path(__file__).parent.parent / "fixtures" / "metrics"
URL = "http://127.0.0.1:8000"


def clock():
    return 50.0


def by_metric(res):
    return {s.metric: s.value for s in res.samples}


def test_vllm_032_page_gives_every_watched_number():
    values = parse_vllm_metrics((FIX / "vllm-0.32.txt").read_text())
    assert values == {
        m.REQ_RUNNING: 3.0,
        m.REQ_WAITING: 1.0,
        m.KV_USAGE: 0.25,
        m.PREEMPTIONS: 0.0,
        m.PROMPT_TOKENS: 410.0,
        m.GEN_TOKENS: 1024.0,
        m.SUCCESS: 32.0,
        m.ITERATIONS: 1050.0,
    }


def test_legacy_gpu_cache_usage_stands_in_for_kv_usage_and_missing_metrics_stay_absent():
    values = parse_vllm_metrics((FIX / "vllm-0.11-legacy.txt").read_text())
    assert values[m.KV_USAGE] == 0.5
    assert m.ITERATIONS not in values  # absent, never 0
    assert m.SUCCESS not in values


def test_data_parallel_engines_sum_counts_and_take_the_fullest_kv_cache():
    values = parse_vllm_metrics((FIX / "vllm-dp2.txt").read_text())
    assert values[m.REQ_RUNNING] == 7.0
    assert values[m.ITERATIONS] == 150.0
    assert values[m.KV_USAGE] == 0.7


def test_data_parallel_engines_are_also_read_each_on_its_own():
    engines = read_page((FIX / "vllm-dp2.txt").read_text()).engines
    assert engines == {
        "0": {m.REQ_RUNNING: 2.0, m.ITERATIONS: 100.0},
        "1": {m.REQ_RUNNING: 5.0, m.ITERATIONS: 50.0},
    }


def test_a_data_parallel_scrape_writes_each_engines_own_series():
    http = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok((FIX / "vllm-dp2.txt").read_text())})
    got = {(s.subject, s.metric): s.value for s in scrape(http, "t", URL, 2.0, clock).samples}
    assert got[("engine:1", m.ITERATIONS)] == 50.0 and got[("", m.ITERATIONS)] == 150.0
    single = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok((FIX / "vllm-0.32.txt").read_text())})
    assert all(s.subject == "" for s in scrape(single, "t", URL, 2.0, clock).samples)  # one engine: nothing more


@pytest.mark.parametrize(
    "page, why",
    [
        ("", "empty"),
        ("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n", "HTML"),
        ('vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_wai', "truncated"),
        ('vllm:num_requests_running{engine="0" 3\n', "unparsable"),
        ("\x00\x01\x02\n", "unparsable"),
    ],
)
def test_pages_that_are_not_prometheus_text_are_refused_with_the_reason(page, why):
    with pytest.raises(ProbeFailed, match=why):
        parse_vllm_metrics(page)


def test_a_healthy_server_yields_health_latency_and_metrics():
    http = FakeHttp(
        {("GET", "/health"): ok(elapsed=0.0016), ("GET", "/metrics"): ok((FIX / "vllm-0.32.txt").read_text())}
    )
    res = scrape(http, "llama", URL, 2.0, clock)
    got = by_metric(res)
    assert got[m.HEALTH_OK] == 1.0 and got[m.HEALTH_LATENCY] == 0.0016
    assert got[m.METRICS_OK] == 1.0 and got[m.ITERATIONS] == 1050.0
    assert res.health_error is None and res.metrics_error is None
    assert all(s.t == 50.0 and s.target == "llama" and s.subject == "" for s in res.samples)


@pytest.mark.parametrize(
    "answer, health_ok",
    [
        (ok(status=503), 0.0),
        (HttpError("refused", "Connection refused"), 0.0),
    ],
)
def test_dead_engine_answers_are_health_zero(answer, health_ok):
    http = FakeHttp({("GET", "/health"): answer, ("GET", "/metrics"): ok("")})
    assert by_metric(scrape(http, "t", URL, 2.0, clock))[m.HEALTH_OK] == health_ok


def test_a_health_timeout_is_no_sample_not_a_dead_verdict():
    http = FakeHttp(
        {
            ("GET", "/health"): HttpError("timeout", "no answer within 2s"),
            ("GET", "/metrics"): ok((FIX / "vllm-0.32.txt").read_text()),
        }
    )
    res = scrape(http, "t", URL, 2.0, clock)
    assert m.HEALTH_OK not in by_metric(res)
    assert str(res.health_error).startswith("timeout")


def test_refused_health_skips_the_metrics_request():
    http = FakeHttp({("GET", "/health"): HttpError("refused", "Connection refused")})
    scrape(http, "t", URL, 2.0, clock)
    assert [r[1] for r in http.requests] == ["/health"]


def test_html_metrics_page_is_a_failed_scrape_with_no_zeros():
    http = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok("<html>login</html>\n")})
    res = scrape(http, "t", URL, 2.0, clock)
    got = by_metric(res)
    assert got[m.METRICS_OK] == 0.0
    assert m.REQ_RUNNING not in got and m.ITERATIONS not in got
    assert "HTML" in str(res.metrics_error)


def test_non_200_metrics_is_a_failed_scrape():
    http = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok("oops", status=500)})
    res = scrape(http, "t", URL, 2.0, clock)
    assert "HTTP 500" in str(res.metrics_error)


def test_families_we_do_not_watch_are_skipped_without_changing_any_number():
    page = (FIX / "vllm-0.32.txt").read_text()
    noise = "".join(
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{b}",model_name="m"}} 5.0\n'
        f'http_requests_total{{handler="/v{b}",method="POST",status="2xx"}} 3.0\n'
        for b in range(300)
    )
    assert parse_vllm_metrics(noise + page) == parse_vllm_metrics(page)


def test_a_garbage_line_is_refused_with_its_line_number():
    page = (FIX / "vllm-0.32.txt").read_text()
    with pytest.raises(ProbeFailed, match=r"line 3 is not a sample"):
        parse_vllm_metrics("# HELP x y\nx 1\nthis is not prometheus\n" + page)


def test_a_longer_name_sharing_a_watched_prefix_is_not_the_watched_metric():
    page = (FIX / "vllm-0.32.txt").read_text()
    extra = 'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 40.0\n'
    assert parse_vllm_metrics(page + extra) == parse_vllm_metrics(page)


def test_a_malformed_watched_line_deep_in_the_page_is_refused():
    page = (FIX / "vllm-0.32.txt").read_text()
    filler = "".join(f'http_requests_total{{handler="/v{b}"}} 3.0\n' for b in range(100))
    with pytest.raises(ProbeFailed, match="unparsable"):
        parse_vllm_metrics(page + filler + 'vllm:num_requests_running{engine="1" 3\n')
    with pytest.raises(ProbeFailed, match="has value"):
        parse_vllm_metrics(page + filler + 'vllm:num_requests_running{engine="1"} three\n')


MODELS = ok('{"object": "list", "data": [{"id": "tiny", "object": "model"}]}')


@pytest.mark.parametrize(
    "check_models, routes, served",
    [
        (True, {("GET", "/health"): ok(), ("GET", "/metrics"): ok(""), ("GET", "/v1/models"): MODELS}, "tiny"),
        (False, {("GET", "/health"): ok(), ("GET", "/metrics"): ok(""), ("GET", "/v1/models"): MODELS}, None),
        (True, {("GET", "/health"): ok(status=503), ("GET", "/metrics"): ok(""), ("GET", "/v1/models"): MODELS}, None),
        (True, {("GET", "/health"): ok(), ("GET", "/metrics"): ok(""), ("GET", "/v1/models"): ok("", 401)}, None),
        (True, {("GET", "/health"): ok(), ("GET", "/metrics"): ok("")}, None),  # 404: not a vLLM that is ready
    ],
    ids=["ready-by-word", "already-ready-not-asked", "health-503", "models-401", "no-models-endpoint"],
)
def test_a_not_yet_ready_target_is_asked_for_its_models_only_when_health_answers_200(check_models, routes, served):
    res = scrape(FakeHttp(routes), "t", URL, 2.0, clock, check_models)
    assert res.served == served


# ------------------------------------------------------------------ bounded against a hostile page
def engine_line(label: str, value: float = 1.0) -> str:
    return f'vllm:iteration_tokens_total_count{{engine="{label}",model_name="m"}} {value}\n'


@pytest.mark.parametrize(
    "label, kept",
    [
        ("0", True),
        ("63", True),
        ("64", False),  # not below max_engines
        ("07", False),  # vLLM writes a rank without leading zeros: "07" and "7" would be one engine twice
        ("+7", False),
        ("٣", False),  # a digit, but not ASCII
        ("", False),
        ("abc", False),
        ("1" * 40, False),
    ],
)
def test_an_engine_label_is_kept_only_as_a_rank_below_the_cap(label, kept):
    assert is_rank(label, 64) is kept


def test_labels_that_are_no_rank_are_dropped_counted_and_still_summed():
    page = engine_line("0", 10.0) + engine_line("1", 5.0) + "".join(engine_line(str(k)) for k in range(1000, 1500))
    read = read_page(page, max_engines=64)
    assert set(read.engines) == {"0", "1"}
    assert read.engines_dropped == 500
    assert read.values[m.ITERATIONS] == 515.0  # the whole server's number counts every line


def test_a_page_with_more_watched_samples_than_its_engines_carry_is_refused():
    page = "".join(engine_line(str(k)) for k in range(1000, 1000 + 32 * 4 + 1))
    assert read_page(page[: page.index(engine_line("1128"))], max_engines=4).engines_dropped == 128
    with pytest.raises(PageRefused, match="more than 128 samples") as refused:
        read_page(page, max_engines=4)
    assert refused.value.reason == "too_many_samples"


def test_a_page_over_the_size_cap_is_refused_unread_and_counted():
    page = (FIX / "vllm-0.32.txt").read_text()
    http = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok(page)})
    res = scrape(http, "t", URL, 2.0, clock, max_page=len(page.encode()) - 1)
    assert res.dropped == {"page_too_large": 1} and res.page is None
    assert by_metric(res)[m.METRICS_OK] == 0.0 and m.ITERATIONS not in by_metric(res)
    assert "max_page_bytes" in str(res.metrics_error)


def test_a_scrape_counts_the_engine_labels_it_dropped_and_writes_no_series_for_them():
    page = engine_line("0") + engine_line("1") + engine_line("5000") + engine_line("x")
    http = FakeHttp({("GET", "/health"): ok(), ("GET", "/metrics"): ok(page)})
    res = scrape(http, "t", URL, 2.0, clock, max_engines=2)
    assert res.dropped == {"engines": 2}
    assert {s.subject for s in res.samples} == {"", "engine:0", "engine:1"}

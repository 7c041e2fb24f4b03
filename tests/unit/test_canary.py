"""The canary: one token from the served model, or a verdict on why not."""

import json

import pytest

from vllm_guardian.config.schema import CanaryProbeConfig
from vllm_guardian.host.http import HttpError
from vllm_guardian.probes.canary import run_canary
from vllm_guardian.series import metrics as m
from vllm_guardian.testing.fake_http import FakeHttp, ok

URL = "http://127.0.0.1:8000"
CFG = CanaryProbeConfig(timeout=5.0)
MODELS = ok(json.dumps({"object": "list", "data": [{"id": "tiny-llama", "object": "model"}]}))
COMPLETION = ok(json.dumps({"id": "cmpl-1", "choices": [{"index": 0, "text": "x"}], "usage": {}}))


class Ticker:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_asks_the_served_model_then_sends_a_one_token_greedy_completion():
    http = FakeHttp({("GET", "/v1/models"): MODELS, ("POST", "/v1/completions"): COMPLETION})
    res = run_canary(http, "t", URL, None, CFG, Ticker(10.0, 10.2))
    assert res.ok and not res.timed_out and res.model == "tiny-llama"
    body = http.requests[1][2]
    assert body == {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    assert http.requests[1][3] == 5.0  # the canary's own timeout


def test_a_known_model_skips_the_models_request():
    http = FakeHttp({("POST", "/v1/completions"): COMPLETION})
    run_canary(http, "t", URL, "m", CFG, Ticker(1.0, 1.1))
    assert [r[1] for r in http.requests] == ["/v1/completions"]


def test_a_timeout_is_the_hang_signal_with_its_latency():
    http = FakeHttp({("POST", "/v1/completions"): HttpError("timeout", "no answer within 5s")})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(100.0, 105.0))
    assert res.timed_out and not res.ok
    samples = {s.metric: s.value for s in res.samples()}
    assert samples == {m.CANARY_OK: 0.0, m.CANARY_TIMEOUT: 1.0, m.CANARY_STARTED: 100.0, m.CANARY_LATENCY: 5.0}
    assert all(s.t == 105.0 for s in res.samples())


def test_a_500_is_a_fast_failure_not_a_hang():
    http = FakeHttp({("POST", "/v1/completions"): ok('{"error": "boom"}', status=500)})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(1.0, 1.01))
    assert not res.ok and not res.timed_out and "HTTP 500" in str(res.error)
    assert m.CANARY_LATENCY not in {s.metric for s in res.samples()}


def test_refused_is_a_failure_not_a_hang():
    http = FakeHttp({("POST", "/v1/completions"): HttpError("refused", "Connection refused")})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(1.0, 1.0))
    assert not res.ok and not res.timed_out


def test_a_body_without_choices_is_a_failure():
    http = FakeHttp({("POST", "/v1/completions"): ok('{"choices": []}')})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(1.0, 1.0))
    assert not res.ok and "bad completion body" in str(res.error)


def test_models_endpoint_garbage_is_a_failure_naming_the_endpoint():
    http = FakeHttp({("GET", "/v1/models"): ok('{"data": []}')})
    res = run_canary(http, "t", URL, None, CFG, Ticker(1.0, 1.0))
    assert not res.ok and "/v1/models" in str(res.error)


# ---------------------------------------------------------------- data parallel: one rank at a time
def test_a_canary_for_one_rank_names_it_in_vllms_header_and_in_its_samples():
    http = FakeHttp({("POST", "/v1/completions"): HttpError("timeout", "no answer within 5s")})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(100.0, 105.0), dp_rank=1)
    assert http.headers[0]["X-data-parallel-rank"] == "1"
    assert res.timed_out and res.dp_rank == 1
    assert {s.metric: s.value for s in res.samples()}[m.CANARY_RANK] == 1.0


def test_a_canary_the_server_routes_itself_sends_no_rank():
    http = FakeHttp({("POST", "/v1/completions"): COMPLETION})
    res = run_canary(http, "t", URL, "m", CFG, Ticker(1.0, 1.1))
    assert "X-data-parallel-rank" not in http.headers[0]
    assert m.CANARY_RANK not in {s.metric for s in res.samples()}


def rank_probe(engines: int):
    """A canary probe over one ready target whose /metrics showed ``engines`` engines."""
    import logging
    from types import SimpleNamespace

    from vllm_guardian.config.schema import Config
    from vllm_guardian.model import Sample
    from vllm_guardian.probes.canary import CanaryProbe
    from vllm_guardian.series.store import SeriesStore

    series = SeriesStore()
    for e in range(engines if engines > 1 else 0):
        series.add(Sample("t", m.engine_subject(e), m.ITERATIONS, 1.0, 1.0))
    parts = SimpleNamespace(
        cfg=Config(), seams=SimpleNamespace(http=None, clock=None), tracker=None, series=series, log=logging.getLogger()
    )
    return CanaryProbe(parts), SimpleNamespace(name="t", ready=True)  # type: ignore[arg-type]


def suspect(rank: int | None, engine: str | None, confirmed: bool = False):
    from vllm_guardian.model import Finding, Kind, Severity
    from vllm_guardian.probes.base import Seen

    f = Finding(Kind.BUSY_LOOP, "t", Severity.CRITICAL, "", {"dp_rank": rank, "engine": engine}, confirmed)
    return Seen(findings={"t": {Kind.BUSY_LOOP: f}})


def test_on_a_data_parallel_server_each_periodic_canary_asks_the_next_rank():
    probe, tr = rank_probe(engines=2)
    from vllm_guardian.probes.base import Seen

    assert [probe._rank(tr, Seen()) for _ in range(4)] == [0, 1, 0, 1]


def test_a_suspect_rank_gets_the_confirming_canary():
    probe, tr = rank_probe(engines=2)
    assert [probe._rank(tr, suspect(1, "engine:1")) for _ in range(3)] == [1, 1, 1]


RANKLESS = {
    "one engine": (1, suspect(None, None)),
    "a rank named by a finding judged on the whole server (no per-engine counters)": (1, suspect(1, None)),
}


@pytest.mark.parametrize("engines, seen", RANKLESS.values(), ids=RANKLESS.keys())
def test_a_canary_is_left_to_the_server(engines, seen):
    probe, tr = rank_probe(engines)
    assert probe._rank(tr, seen) is None


def test_a_target_not_ready_yet_gets_no_rank():
    probe, tr = rank_probe(engines=2)
    tr.ready = False
    from vllm_guardian.probes.base import Seen

    assert probe._rank(tr, Seen()) is None


@pytest.mark.parametrize("engines, due_after", [(1, 10.0), (2, 5.0), (4, 2.5)])
def test_periodic_canaries_ask_each_rank_every_interval(engines, due_after):
    from types import SimpleNamespace

    from vllm_guardian.probes.base import Seen

    probe, tr = rank_probe(engines)
    tr = SimpleNamespace(name="t", ready=True, hold=None, retired=False, grpc=False, last_canary_start=100.0)
    assert not probe._due(tr, 100.0 + due_after - 0.1, Seen())
    assert probe._due(tr, 100.0 + due_after, Seen())

"""The gates probe against a real simulated vLLM server (real process, real HTTP).

Healthy: rounds pass and build the baseline. Each garbage mode ends in the right
output_corruption level and condition. A server without logprobs, gate requests
that fail, a swapped model and a reference text longer than the context give
status lines, never an incident.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping

import pytest

from vllm_guardian.config.schema import DiagnosticPromptConfig
from vllm_guardian.host.http import HttpClient, HttpError, HttpResponse, StdlibHttpClient
from vllm_guardian.gates.exchange import REASONS, key_for
from vllm_guardian.gates.known_answers import BUILTIN_CHECKS
from vllm_guardian.probes.base import Seen
from vllm_guardian.sim.control import SimServer
from tests.support.gates_world import NAME, World


@pytest.fixture(scope="module")
def server():
    with SimServer(startup_delay=0.2).start() as s:
        s.wait_ready(30)
        yield s


@pytest.fixture(autouse=True)
def healthy(server):
    server.set_fault("none")
    yield


def test_a_healthy_server_passes_every_round_and_gets_a_complete_baseline(server, tmp_path):
    w = World(server.url, tmp_path)
    for _ in range(5):
        tg = w.round()
        assert tg.failures == ()
    assert w.finding() is None
    st = w.status()
    assert st["health_score"] == 100 and st["baseline"] == "complete" and st["notes"] == []
    assert st["requests"] == 5 * (2 + 3 + 3 + 1)  # 2 diagnostics, 3 built-in checks, 3 shadow, reference
    assert st["confirmation_rounds"] == 0 and st["confirming"] is None


@pytest.mark.parametrize(
    "fault, levels, condition",
    [
        ("repeat_chars", {"L1", "L5"}, "A"),  # 5 gate completions of "!!!!": A in one round
        ("control_chars", {"L1", "L5"}, "A"),
        ("nan_logprobs", {"L3"}, "B"),
        ("flat_logprobs", {"L3", "L5"}, "B"),  # flat over 50k tokens: entropy
        ("high_perplexity", {"L2"}, None),  # one L2 failure per round: A after 5 rounds
        ("wrong_answers", {"L4", "L5"}, "D"),  # fluent but wrong: only known answers and agreement see it
    ],
)
def test_each_garbage_mode_ends_in_output_corruption(server, tmp_path, fault, levels, condition):
    w = World(server.url, tmp_path)
    for _ in range(3):
        w.round()  # the baseline: 3 reference perplexities
    server.set_fault(fault)
    finding = None
    for _ in range(6):
        tg = w.round()
        finding = w.finding()
        if finding is not None:
            break
    assert finding is not None, tg.failures
    assert levels <= set(finding.signals["levels"]) | {f.level for f in tg.failures}
    assert finding.signals["condition"] == (condition or "A")
    sample = finding.signals["sample"]
    assert sample["level"] == finding.signals["level"] and sample["expected"]
    assert w.status()["health_score"] <= 20


def test_wrong_answers_fail_l5_with_the_expected_regex_in_the_sample(server, tmp_path):
    w = World(server.url, tmp_path, diagnostics=(DiagnosticPromptConfig("1+1=", r"^\s*2", 4),))
    w.round()
    server.set_fault("wrong_answers")
    for _ in range(3):
        w.round()
    f = w.finding()
    assert f.signals["condition"] == "D" and f.signals["level"] == "L5"
    assert f.signals["sample"]["prompt"] == "1+1=" and f.signals["sample"]["output"].startswith(" 3")
    assert f.signals["sample"]["expected"] == r"/^\s*2/"


def test_a_server_without_logprobs_is_a_status_line_not_an_incident(server, tmp_path):
    server.set_fault("no_logprobs")
    w = World(server.url, tmp_path)
    for _ in range(6):
        assert w.round().failures == ()
    assert w.finding() is None
    notes = " | ".join(w.status()["notes"])
    assert "no logprobs" in notes and "no prompt logprobs" in notes


def test_a_reference_text_longer_than_the_context_is_a_status_line(server, tmp_path):
    w = World(server.url, tmp_path, reference_text="word " * 2000)
    for _ in range(6):
        assert w.round().failures == ()
    assert w.finding() is None
    assert any("longer than the model's context" in n for n in w.status()["notes"])


def test_a_model_swapped_under_the_same_target_gets_its_own_baseline(tmp_path):
    with SimServer(startup_delay=0.2).start() as own:  # the swap cannot be undone: a server of its own
        own.wait_ready(30)
        w = World(own.url, tmp_path)
        for _ in range(3):
            w.round()
        own.set_fault("swap_model")
        for _ in range(4):
            assert w.round().failures == ()
        assert w.finding() is None
        st = w.status()
        assert st["model"].endswith("-swapped") and st["baseline"] == "complete"


class Broken:
    """The seam answering like a gateway in trouble: an HTTP status, or a timeout."""

    def __init__(self, status: int | None) -> None:
        self.status = status

    def request(self, method, url, timeout, body=None, headers=None):
        if url.endswith("/v1/models"):  # the API server answers; completions are in trouble
            return HttpResponse(200, b'{"data": [{"id": "m"}]}', 0.01)
        if self.status is None:
            raise HttpError("timeout", "timed out after 30s", 30.0)
        return HttpResponse(self.status, b'{"error": {"message": "nope"}}', 0.01)


@pytest.mark.parametrize("status", [None, 400, 404, 429, 503])
def test_failing_gate_requests_are_status_lines_never_an_incident(tmp_path, status):
    w = World("http://127.0.0.1:9", tmp_path, http=Broken(status))
    for _ in range(8):
        assert w.round().failures == ()
    assert w.finding() is None
    (note,) = w.status()["notes"]
    assert note.startswith("gate request")


def test_a_corrupted_baseline_file_is_a_status_line_then_a_new_baseline(server, tmp_path):
    w = World(server.url, tmp_path)
    for _ in range(3):
        w.round()
    for p in (tmp_path / "gates").glob("baseline-*.json"):
        p.write_text("{garbage")
    w2 = World(server.url, tmp_path)  # a guardian restarted on the same state dir
    w2.round()
    assert any("corrupted" in n for n in w2.status()["notes"])
    for _ in range(3):
        assert w2.round().failures == ()
    assert w2.status()["baseline"] == "complete" and w2.finding() is None


class Exchange:
    """Other nodes' fingerprints, as ``answer(fps)`` makes them (none until it is set)."""

    def __init__(self) -> None:
        self.answer: Callable[[Mapping[str, str]], list[dict[str, str]]] = lambda fps: []

    def share(self, model, version, target, fps, ttl, max_age):
        return self.answer(fps), None

    def dropped(self) -> dict[str, int]:
        return {}

    def deleted(self) -> dict[str, int]:
        return {}


def test_l4_the_instance_disagreeing_with_agreeing_peers_is_the_suspect(server, tmp_path):
    exchange = Exchange()
    w = World(server.url, tmp_path, exchange=exchange, diagnostics=())
    w.round()  # baseline for the local answers
    # two remote peers agree with a different answer to every shadow prompt
    exchange.answer = lambda fps: [{p: "0" * 16 for p in fps}] * 2
    for _ in range(3):
        w.round()
    f = w.finding()
    assert f.signals["condition"] == "C" and f.signals["level"] == "L4" and not f.signals["alert_only"]
    # judged without the other nodes it agrees with its baseline: it rests on peers, a hint only
    assert f.signals["own_conditions"] == [] and f.signals["external"] == ["peers"]


class RecordingRedis:
    """The hashes the exchange writes, kept in memory."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, str]] = {}

    def hset(self, name: str, key: str, value: str) -> int:
        self.hashes.setdefault(name, {})[key] = value
        return 1

    def expire(self, name: str, time: int) -> bool:
        return True

    def execute_command(self, command: str, name: str, *args, **options) -> tuple[int, dict[str, str]]:
        assert command == "HSCAN"
        return 0, dict(self.hashes.get(name, {}))

    def hdel(self, name: str, *keys: str) -> int:
        return 0


def test_built_by_the_table_on_a_redis_connection_the_probe_shares_its_fingerprints_there(server, tmp_path):
    redis = RecordingRedis()
    w = World(server.url, tmp_path, redis=redis, diagnostics=())
    tg = w.round()
    assert list(redis.hashes) == [key_for(tg.model or "", tg.version or "")]
    assert list(redis.hashes[key_for(tg.model or "", tg.version or "")]) == [f"n1/{NAME}"]
    assert w.shared.summary().fingerprints_dropped == dict.fromkeys(REASONS, 0)


def test_built_by_the_table_without_redis_the_probe_judges_l4_on_this_node_only(server, tmp_path):
    w = World(server.url, tmp_path, diagnostics=())
    w.round()
    assert w.shared.exchange is None and w.shared.summary().fingerprints_dropped is None


def test_an_accepted_report_makes_a_confirming_round_of_its_own_due_at_once(server, tmp_path):
    w = World(server.url, tmp_path, interval=3600.0)
    w.round()
    assert w.probe.jobs(w.now + 10, Seen()) == []  # next regular round in an hour
    later = time.time() + 60  # reports stamped before the start (+ max_skew) are refused
    report = {
        "instance_id": "n1/sim",
        "request_id": "gw-1",
        "timestamp": later,
        "check_level": "L3",
        "type": "nan",
        "details": {},
    }
    assert w.shared.accept_report(json.dumps(report), w.now + 10, later) == "accepted"
    (job,) = w.probe.jobs(w.now + 10, Seen())
    assert job.subject == NAME


def test_l4_two_instances_split_without_baseline_is_alert_only(server, tmp_path, monkeypatch):
    exchange = Exchange()
    exchange.answer = lambda fps: [{p: "0" * 16 for p in fps}]  # one remote peer, answering differently
    w = World(server.url, tmp_path, exchange=exchange, diagnostics=())
    # neither instance ever had a healthy reference: no baseline is taken
    monkeypatch.setattr("vllm_guardian.probes.gates.next_baseline", lambda *a: None)
    for _ in range(3):
        w.round()
    f = w.finding()
    assert f.signals["condition"] == "C" and f.signals["alert_only"]


# what vLLM 0.32 answers to a logprobs request when the logits are NaN (measured)
VLLM_NAN_400 = (
    b'{"error":{"message":"Out of range float values are not JSON compliant",'
    b'"type":"BadRequestError","param":null,"code":400}}'
)


class FailsWithLogprobs:
    """vLLM with NaN logits: asked for logprobs it cannot encode them; without, it answers."""

    def __init__(self, real: HttpClient, status: int, body: bytes) -> None:
        self.real, self.status, self.body = real, status, body

    def request(self, method, url, timeout, body=None, headers=None):
        if isinstance(body, dict) and (body.get("logprobs") is not None or body.get("prompt_logprobs") is not None):
            return HttpResponse(self.status, self.body, 0.01)
        return self.real.request(method, url, timeout, body)


@pytest.mark.parametrize("status, body", [(400, VLLM_NAN_400), (500, b"Internal Server Error")])
def test_logprobs_that_fail_only_when_asked_for_are_condition_b(server, tmp_path, status, body):
    w = World(server.url, tmp_path, http=FailsWithLogprobs(StdlibHttpClient(), status, body))
    w.round()
    f = w.finding()
    assert f is not None and f.signals["condition"] == "B" and f.signals["sample"]["check"] == "non_finite"
    assert f"HTTP {status}" in f.signals["sample"]["figures"]["detail"]


# ---------------------------------------------------------------- confirming fast
def _baselined(server, tmp_path, **gates) -> World:
    w = World(server.url, tmp_path, **dict(dict(interval=60.0), **gates))
    for _ in range(3):  # the baseline: 3 reference perplexities, one round an interval
        assert w.tick(60.0)
    return w


def _until_finding(w: World, step: float, limit: float):
    start = w.now
    while w.now - start < limit:
        w.tick(step)
        f = w.finding()
        if f is not None:
            return f, w.now - start
    return None, w.now - start


@pytest.mark.parametrize(
    "fault, condition",
    [
        ("wrong_answers", "D"),  # L5 three rounds in a row
        ("high_perplexity", "A"),  # L2 alone: five failures within the window
    ],
)
def test_a_failing_round_is_confirmed_within_seconds_not_intervals(server, tmp_path, fault, condition):
    w = _baselined(server, tmp_path)
    server.set_fault(fault)
    assert w.tick(60.0)  # the first round after the onset fails
    assert w.status()["failed_rounds"] == 1
    f, took = _until_finding(w, 0.5, 30.0)
    assert f is not None and f.signals["condition"] == condition, w.status()
    assert took <= 4 * w.cfg.gates.confirm_delay + 1  # quick rounds, not 60 s apart
    assert w.status()["confirmation_rounds"] >= 2


def test_confirmation_rounds_are_bounded_per_failing_episode(server, tmp_path):
    w = _baselined(server, tmp_path, confirm_rounds=2)
    server.set_fault("high_perplexity")
    assert w.tick(60.0)
    ran = sum(w.tick(1.0) for _ in range(30))
    assert ran == 2 and w.status()["confirmation_rounds"] == 2 and w.status()["confirming"] == 0
    assert not w.tick(25.0) and w.tick(10.0)  # then the interval: 60 s after the last quick round (at +4 s)


def test_a_clean_round_ends_the_episode_and_the_interval_returns(server, tmp_path):
    w = _baselined(server, tmp_path)
    server.set_fault("wrong_answers")
    assert w.tick(60.0)
    server.set_fault("none")
    assert w.tick(2.0)  # the confirmation round: clean
    assert w.status()["confirming"] is None and w.finding() is None
    assert sum(w.tick(1.0) for _ in range(50)) == 0


def test_a_confirmation_request_runs_an_own_round_at_once(server, tmp_path):
    w = _baselined(server, tmp_path)
    assert not w.tick(1.0)
    w.probe.request_confirmation(NAME, "a gateway reported L5 on it")
    assert w.tick(0.1)
    assert w.status()["confirmation_rounds"] == 1
    assert not w.tick(1.0)  # it passed: back to the interval


def test_an_accepted_external_report_asks_for_a_confirmation_round(server, tmp_path):
    w = _baselined(server, tmp_path)
    w.shared.known_targets = frozenset({NAME})
    msg = {
        "instance_id": f"n1/{NAME}",
        "request_id": "r1",
        "timestamp": 1e9,
        "check_level": "L5",
        "details": {},
        "type": "x",
    }
    import json
    import time

    later = time.time() + 60  # reports stamped before the start (+ max_skew) are refused
    msg["timestamp"] = later
    assert w.shared.accept_report(json.dumps(msg), w.now, later) == "accepted"
    assert w.tick(0.1)


def test_builtin_checks_see_wrong_answers_without_any_configured_diagnostic_or_shadow(server, tmp_path):
    w = _baselined(server, tmp_path, diagnostics=(), shadow=False)
    server.set_fault("wrong_answers")
    w.tick(60.0)
    f, _ = _until_finding(w, 1.0, 20.0)
    assert f is not None and f.signals["condition"] == "D"
    assert f.signals["sample"]["prompt"] in {d.prompt for d in BUILTIN_CHECKS}


def test_the_finding_carries_answers_logprobs_baseline_model_and_version(server, tmp_path):
    w = _baselined(server, tmp_path)
    server.set_fault("wrong_answers")
    w.tick(60.0)
    f, _ = _until_finding(w, 1.0, 20.0)
    sig = f.signals
    assert sig["model"] == w.status()["model"] and sig["vllm_version"] == w.status()["version"]
    ev = {e["prompt"]: e for e in sig["evidence"]}
    one = ev["2+2="]  # a diagnostic expecting the baseline
    assert one["levels"] == ["L5"] or "L5" in one["levels"]
    assert one["output"] != one["baseline_answer"] and one["tokens"] and one["token_logprobs"]
    assert len(one["token_logprobs"]) == len(one["tokens"]) and one["top_logprobs"]
    assert len(sig["failing_rounds"]) == 3


def test_without_a_trust_key_the_guardian_says_once_that_external_evidence_never_restarts(tmp_path, caplog):
    import logging as _logging

    with caplog.at_level(_logging.WARNING):
        w = World("http://127.0.0.1:1", tmp_path)
    said = [r.getMessage() for r in caplog.records if "never a restart" in r.getMessage()]
    assert len(said) == 1 and "gates.trust" in said[0]
    assert not w.shared.trusted and w.shared.summary().trust == "unsigned"

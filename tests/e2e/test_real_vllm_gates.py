"""The output-correctness gates against a real vLLM 0.32 (CPU build, tiny random Llama).

One server for the module, in this order:
1. a guardian with gates on watches the server from its start: warm-up, 60 s of
   concurrent load, 60 s idle — not one gate failure, no incident;
2. how stable greedy answers are (sequential, and concurrent under load), and what one
   gate round costs the server: the numbers the L4/L5 design and the cost figure rest on;
3. noise in the logits (fault plugin ``logits_noise``) -> output_corruption, opened by
   condition A (L1/L2) or D (L5), with the L2 perplexity failure among the gate failures;
4. NaN logits (``logits_nan``) -> output_corruption, condition B, level L3;
5. fluent but wrong (``logits_permute``: the model's whole-word tokens rotated by one place,
   finite and as confident) -> output_corruption by condition C or D, confirmed by quick rounds,
   its bundle holding the failing answers (``gates.json``) and no py-spy stack.

The tiny random model cannot answer "1+1=": its diagnostic expects ``baseline``.
Measured numbers go to the terminal summary (``results``).
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest

from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates.cost import cost
from vllm_guardian.gates.known_answers import BUILTIN_CHECKS
from vllm_guardian.gates.perplexity import BUILTIN_REFERENCE
from vllm_guardian.sim.control import LoadGenerator
from tests.e2e.harness import E2E_PYTHON, FaultSwitch, GuardianRun, VllmServer, ensure_model, greedy, reference_seconds
from tests.support.wait import poll

from tests.e2e.vllm_fault_plugin import guardian_vllm_fault_plugin as fp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

SERVER_READY_TIMEOUT = 900.0
GUARDIAN_READY_TIMEOUT = 180.0
INTERVAL = 2.0
GATES = {
    "enabled": True,
    "interval": INTERVAL,
    "diagnostics": [{"prompt": "1+1=", "expect": "baseline", "max_tokens": 4}],
}
SHADOW = GatesConfig().shadow_prompts
# a round at the defaults: the diagnostic, the built-in checks, the shadow prompts (and the reference)
PROMPTS = (
    (("1+1=", 4),)
    + tuple((d.prompt, d.max_tokens) for d in BUILTIN_CHECKS)
    + tuple((p, GatesConfig().shadow_max_tokens) for p in SHADOW)
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-gates")


@pytest.fixture(scope="module")
def server(workdir):
    assert E2E_PYTHON.exists(), f"{E2E_PYTHON} is missing: run `make e2e-vllm`"
    s = VllmServer(ensure_model(), workdir / "faults", workdir / "vllm.log").start()
    try:
        yield s
    finally:
        s.stop()
        assert s.leftovers() == (), s.leftovers()


@pytest.fixture
def switch(server) -> FaultSwitch:
    return FaultSwitch(server.fault_dir)


def gates_guardian(workdir, name: str, port: int) -> GuardianRun:
    return GuardianRun(workdir / name, port, extra={"gates": GATES}).start()


def gates(g: GuardianRun) -> dict:
    return (g.target() or {}).get("gates") or {}


def test_1_a_healthy_server_through_warm_up_load_and_idle_has_no_gate_failure(server, workdir, results):
    g = gates_guardian(workdir, "g-healthy", server.port)  # before the server is up: it sees the warm-up
    try:
        results.setdefault("vllm_server_start_s", server.wait_ready(SERVER_READY_TIMEOUT))
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        assert poll(lambda: gates(g).get("baseline") == "complete", 120), (gates(g), g.log_text())
        with LoadGenerator(server.url, server.model, clients=4).start() as load:
            time.sleep(60)
        loaded = load.stats()
        time.sleep(60)
        st = gates(g)
        results["gates_healthy_rounds"] = st["rounds"]
        results["gates_healthy_failed_rounds"] = st["failed_rounds"]
        results["gates_healthy_tie_flips"] = st["tie_flips"]
        results["gates_healthy_failures_by_level"] = json.dumps(st["failures_by_level"], sort_keys=True)
        results["gates_healthy_load_requests"] = loaded.ok
        assert loaded.ok > 0
        assert st["rounds"] >= 20 and st["failed_rounds"] == 0 and st["incomplete_rounds"] == 0, st
        assert st["health_score"] == 100, st
        assert [i for i in g.incidents() if i["kind"] == "output_corruption"] == []
    finally:
        assert g.stop() == 0, g.log_text()


def test_2_greedy_answers_are_stable_sequentially_and_under_load(server, results):
    server.wait_ready(SERVER_READY_TIMEOUT)
    first: dict[str, tuple[str, list[float]]] = {}
    seq: dict[str, set[str]] = {p: set() for p, _ in PROMPTS}
    round_s = []
    for _ in range(5):
        spent = reference_seconds(server, BUILTIN_REFERENCE)
        for prompt, n in PROMPTS:
            text, lps, dt = greedy(server, prompt, n)
            spent += dt
            seq[prompt].add(text)
            first.setdefault(prompt, (text, lps))
        round_s.append(spent)
    loaded: dict[str, set[str]] = {p: set() for p, _ in PROMPTS}
    drift = [0.0]
    lock = threading.Lock()

    def ask():
        for prompt, n in PROMPTS:
            text, lps, _ = greedy(server, prompt, n, timeout=120.0)
            with lock:
                loaded[prompt].add(text)
                if text == first[prompt][0]:
                    drift[0] = max(drift[0], max(abs(a - b) for a, b in zip(lps, first[prompt][1], strict=True)))

    with LoadGenerator(server.url, server.model, clients=4).start():
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    results["gates_greedy_distinct_sequential"] = max(len(v) for v in seq.values())
    results["gates_greedy_distinct_under_load"] = max(len(v) for v in loaded.values())
    results["gates_greedy_logprob_max_drift_under_load"] = round(drift[0], 6)
    # one round at the defaults, measured idle: 1 diagnostic, 3 built-in checks, 3 shadow prompts, the reference text
    per_round = statistics.median(round_s)
    c = cost(GatesConfig(), per_round)
    results["gates_round_server_s_median"] = round(per_round, 4)
    results["gates_cost_requests_per_hour"] = c.requests_per_hour
    results["gates_cost_server_s_per_hour"] = round(c.server_seconds_per_hour, 2)
    results["gates_cost_share_of_capacity_pct"] = round(100 * c.share_of_capacity, 3)
    assert max(len(v) for v in seq.values()) == 1
    assert max(len(v) for v in loaded.values()) == 1, loaded


def whole_word_ids(model_dir) -> list[int]:
    return fp.whole_word_ids(json.loads((model_dir / "tokenizer.json").read_text()))


def _onset(switch: FaultSwitch, fault: str) -> float | None:
    got = poll(lambda: switch.onset(fault), 60)
    return got["t"] if got else None


@pytest.mark.parametrize("fault", ["logits_noise", "logits_nan", "logits_permute"])
def test_3_corrupted_logits_are_output_corruption(server, workdir, switch, results, fault):
    server.wait_ready(SERVER_READY_TIMEOUT)
    g = gates_guardian(workdir, f"g-{fault}", server.port)
    try:
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        assert poll(lambda: gates(g).get("baseline") == "complete", 120), (gates(g), g.log_text())
        content = " ".join(map(str, whole_word_ids(server.model_dir))) if fault == "logits_permute" else ""
        switch.on(fault, content)
        inc = g.wait_incident("output_corruption", 120)
        assert inc is not None, (gates(g), g.log_text())
        onset = _onset(switch, fault)
        assert onset is not None
        results[f"gates_{fault}_onset_to_incident_s"] = round(inc["opened_at"] - onset, 2)
        sig = inc["signals"]
        by_level = gates(g).get("failures_by_level") or {}
        results[f"gates_{fault}_condition"] = sig["condition"]
        results[f"gates_{fault}_failures_by_level"] = json.dumps(by_level, sort_keys=True)
        if fault == "logits_nan":
            assert sig["condition"] == "B" and sig["level"] == "L3", sig
        elif fault == "logits_permute":
            assert sig["condition"] in ("C", "D"), sig
            assert gates(g)["confirmation_rounds"] >= 2, gates(g)
            first = sig["evidence"][0]
            assert first["output"] != first["baseline_answer"] and first["token_logprobs"], first
            bundle = g.state_dir / "incidents" / inc["id"]
            assert poll(lambda: (bundle / "gates.json").exists(), 60), sorted(p.name for p in bundle.glob("*"))
            assert not list(bundle.glob("pyspy-*")) and not list(bundle.glob("flame-*"))
        else:
            assert sig["condition"] in ("A", "D"), sig
            assert by_level.get("L2", 0) > 0 and by_level.get("L5", 0) > 0, by_level
            assert sig["sample"]["expected"]
    finally:
        switch.clear(fault)
        assert g.stop() == 0, g.log_text()
    assert poll(lambda: server.serves(), 60)

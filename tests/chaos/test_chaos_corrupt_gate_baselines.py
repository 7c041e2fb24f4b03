"""The gate baselines damaged before a guardian with gates enabled starts (the other state files:
test_chaos_corrupt_state): garbage, binary, a JSON nest 100 000 deep, valid JSON of the wrong
schema. The guardian starts against a simulated vLLM, says once which baseline file is bad and
why, opens no ``output_corruption`` incident, takes the baseline again and writes a valid file
over the bad one."""

from __future__ import annotations

import json
import urllib.request

import pytest

from vllm_guardian.gates.baseline import Baseline, BaselineStore

from tests.support.guardian_process import GuardianProcess, sweep
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll
from tests.support.redis_procs import kill_all, servers_for

DAMAGE = {
    "garbage": (b"{not json at all", "corrupted"),
    "binary": (b"\x00\xff\xfe\x80" * 256, "unreadable"),
    "deep nest": (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "wrong schema": (
        json.dumps({"format": 1, "target": "sim", "answers": [], "perplexities": "x"}).encode(),
        "corrupted",
    ),
}

GATES = {
    "gates": {
        "enabled": True,
        "interval": 1.0,
        "diagnostics": [{"prompt": "1+1=", "expect": "^\\s*2", "max_tokens": 4}],
        "baseline_samples": 1,
    },
    "probes": {"canary": {"interval": 2.0}},
    "detectors": {"output_corruption": {"mode": "alert"}},
}


def served(sim: SimServer) -> tuple[str, str]:
    """(model, version) as the server reports them: what the baseline file is keyed by."""
    with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as r:
        model = json.load(r)["data"][0]["id"]
    with urllib.request.urlopen(sim.url + "/version", timeout=10) as r:
        version = json.load(r)["version"]
    return model, version


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_gate_baseline_is_reported_once_and_taken_again(tmp_path, damage):
    body, said = DAMAGE[damage]
    port = free_port()
    sim = SimServer(port=port, startup_delay=0.5).start()
    g = GuardianProcess(tmp_path, port, extra=GATES)
    try:
        sim.wait_ready(60)
        model, version = served(sim)
        path = BaselineStore(str(g.state_dir)).path("sim", model, version)
        path.parent.mkdir(parents=True)
        path.write_bytes(body)
        g.start()
        assert g.wait_ready(60), g.log_text()
        rounds = poll(lambda: (t := g.target()) and (t.get("gates") or {}).get("rounds", 0) >= 3 and t, 60)
        assert rounds, g.log_text()
        assert rounds["gates"]["baseline"] == "complete" and rounds["gates"]["health_score"] == 100
        log = g.log_text()
        reported = [line for line in log.splitlines() if str(path) in line]
        assert len(reported) == 1 and said in reported[0] and "re-baselining" in reported[0], log
        assert "Traceback" not in log, log
        assert not [i for i in g.incidents() if i["kind"] == "output_corruption"]
        again = Baseline.from_dict(json.loads(path.read_text(encoding="utf-8")))
        assert (again.target, again.model, again.version) == ("sim", model, version) and again.answers
    finally:
        sim.stop()
        assert g.stop() == 0
        sweep(port)
        kill_all(servers_for(g.state_dir))

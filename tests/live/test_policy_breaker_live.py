"""The percentage breaker live (docs/policy.md, Breaker): four real ``guardian run`` processes share one
real Redis, each supervising two simulated vLLM servers of the same model; all eight spin at once.
At most half of the model's targets are restarted within the window, the rest are held in the lease
phase (nothing drained or stopped), and exactly one guardian pages, with the list of what is held."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.guardian_process import GuardianProcess, command_restart, sweep, trip
from tests.support.wait import poll

pytestmark = pytest.mark.live

LOOP = ("busy_loop", "engine_stall")  # a spin starved of CPU (eight on two cores) may read as a stall
BREAKER = {
    "breaker": {"enabled": True, "scope": "model", "max_fraction": 0.5, "window": 300},
    "fleet": {"max_concurrent_restarts": 8},
    "node_anomaly": {"fraction": 1.0, "min_targets": 3},  # two targets per node: never the node's fault
    "budget": {"max_restarts": 5, "period": 3600},
}


@pytest.fixture
def redis_server():
    with RedisServer() as r:
        yield r


def guardian(tmp_path, n: int, ports: list[int], redis_url: str) -> GuardianProcess:
    d = tmp_path / f"g{n}"
    d.mkdir()
    targets = []
    for name, port in zip(("a", "b"), ports, strict=True):
        t = command_restart(port, d, stop_timeout=3, log_file=str(d / f"restarted-{name}.log"))
        targets.append({**t, "name": f"sim-{name}", "model": "sim-model"})
    extra = {
        "node": f"node-{n}",
        "targets": targets,
        "alerts": {"redis_url": redis_url},
        "policy": BREAKER,
        "detectors": {"busy_loop": {"cpu_ratio": 0.2}},
    }
    return GuardianProcess(d, ports[0], extra=extra).start()


def loop_of(g: GuardianProcess, name: str) -> dict | None:
    return next((i for i in g.incidents() if i["kind"] in LOOP and i["target"]["name"] == name), None)


def fate(inc: dict | None) -> str | None:
    """restarted (drained and on), held (the breaker), or None (not decided yet)."""
    if inc is None:
        return None
    names = {a["name"]: a["status"] for a in inc["actions"]}
    if "draining" in names or "stopping" in names:
        return "restarted"
    if names.get("breaker") in ("held", "escalated"):
        return "held"
    return None


def test_four_guardians_eight_targets_of_one_model_all_spinning_half_restart_the_rest_held_one_page(
    tmp_path, redis_server
):
    ports = [free_port("127.0.0.1") for _ in range(8)]
    sims, guards = [], []
    try:
        for port in ports:
            sims.append(SimServer(port=port, startup_delay=1.0).start())
        for sim in sims:
            sim.wait_ready(90)
        guards = [guardian(tmp_path, n, ports[2 * n : 2 * n + 2], redis_server.url) for n in range(4)]
        for g in guards:
            for name in ("sim-a", "sim-b"):
                assert g.wait_ready(60, name=name), g.log_text()
        for port in ports:
            trip(port, "busy_loop")

        def fates():
            out = {f"{g_.state_dir.parent.name}/{t}": fate(loop_of(g_, t)) for g_ in guards for t in ("sim-a", "sim-b")}
            return out if all(out.values()) else None

        decided = poll(fates, 240, every=2)
        assert decided, "\n\n".join(g.log_text()[-4000:] for g in guards)
        restarted = [k for k, v in decided.items() if v == "restarted"]
        held = [k for k, v in decided.items() if v == "held"]
        assert 1 <= len(restarted) <= 4 and len(held) == 8 - len(restarted), decided
        incidents = [i for g in guards for t in ("sim-a", "sim-b") if (i := loop_of(g, t))]
        pages = [
            (i, a) for i in incidents for a in i["actions"] if a["name"] == "breaker" and a["status"] == "escalated"
        ]
        assert len(pages) == 1, [i["actions"] for i in incidents]
        pager, page = pages[0]
        assert "breaker model:sim-model tripped" in page["detail"] and "held: node-" in page["detail"]
        client = redis_server.client()
        sent = [json.loads(f.get("event") or f[b"event"]) for _, f in client.xrange("guardian:alerts")]
        paged = [e for e in sent if any(a["name"] == "breaker" and a["status"] == "escalated" for a in e["actions"])]
        assert {e["incident_id"] for e in paged} == {pager["id"]}  # its alert went out again with the page
        assert sorted(str(m) for m in client.smembers("guardian:breaker:{model:sim-model}:held")) == sorted(
            f"node-{k[1]}/{k.split('/')[1]}" for k in held
        )
    finally:
        for g in guards:
            g.stop()
        for sim in sims:
            sim.stop(timeout=2)
        for port in ports:
            sweep(port)

"""Hostile L4 peers and a fingerprint hash stuffed with junk, against a real ``guardian run`` in
remediate mode (trust keys, a restart it could do) beside a healthy configured simulated vLLM,
on a real Redis.

The hostile inputs: two servers started beside it (autodiscovered: they own their sockets, and
answer with the same model id and ``/version``) that agree on other answers to every shadow
prompt; and 1 100 junk fields in the shared fingerprint hash of its model and version (not JSON,
not ``<node>/<target>``, unsigned, under the guardian's own node name, not UTF-8). Two honest nodes publish
signed fingerprints of the healthy answers meanwhile.

What must hold: the configured server is never the suspect (no incident, no drain, no stop, no
restart: it keeps its pid and its readiness); the junk is deleted and counted; cross-node L4 still
votes (the two honest nodes); readiness and status answer throughout.
"""

from __future__ import annotations

import json
import os
import threading
import time

from tests.chaos.chaos_util import Watcher
from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.wait import poll
from vllm_guardian.gates.exchange import key_for
from vllm_guardian.gates.trust import Keys, sign
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.testing.redis_server import RedisServer

NODE = "node-a"
SECRET = "chaos-secret-0123456789"
KEYS = Keys({"gw": SECRET.encode()}, "gw")
INTERVAL = 2.0
JUNK = 1100  # over the 1 024 fields that once switched L4 across nodes off for good


class HonestNodes:
    """Two other nodes' guardians: signed entries carrying the healthy server's own fingerprints
    (written, not shared: a real guardian would also clean the hash, and this test is about ours)."""

    def __init__(self, client, model: str, version: str) -> None:
        self.client, self.key = client, key_for(model, version)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            raw = self.client.hget(self.key, f"{NODE}/sim")
            if raw:
                fps = json.loads(raw)["fps"]
                for node in ("node-b", "node-c"):
                    entry = sign({"node": node, "target": "sim", "fps": fps, "t": time.time()}, KEYS)
                    self.client.hset(self.key, f"{node}/sim", json.dumps(entry))
            self._stop.wait(1.0)

    def __enter__(self) -> HonestNodes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def junk(i: int) -> tuple[str | bytes, str]:
    unsigned = {"node": f"evil-{i}", "target": "sim", "fps": {"p": "0" * 16}, "t": time.time()}
    kinds: list[tuple[str | bytes, str]] = [
        (f"evil-{i}/sim", "{not json"),
        (f"evil-{i}", json.dumps(unsigned)),  # not a <node>/<target> field
        (f"evil-{i}/sim", json.dumps(unsigned)),  # unsigned
        (f"{NODE}/junk-{i}", "[]"),  # under the guardian's own node name
        (b"\xffjunk-%d/sim" % i, "{}"),  # not UTF-8
    ]
    return kinds[i % len(kinds)]


def test_hostile_l4_peers_and_a_stuffed_fingerprint_hash_make_the_guardian_do_nothing_wrong(tmp_path):
    port, http_port = free_port(), free_port()
    keys_file = tmp_path / "trust.keys"
    keys_file.write_text(f"gw {SECRET}\n")
    os.chmod(keys_file, 0o600)
    redis = RedisServer().start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    impostors = [SimServer(startup_delay=0.5).start() for _ in range(2)]
    extra = {
        "node": NODE,
        "autodiscover": True,  # the impostors are found as any vLLM on the node would be
        "targets": [command_restart(port, tmp_path)],
        "alerts": {"redis_url": redis.url},
        "api": {"http": f"127.0.0.1:{http_port}"},
        # no regex diagnostics: the impostors fail none of their own checks, only L4 sees them
        "gates": {
            "enabled": True,
            "interval": INTERVAL,
            "baseline_samples": 1,
            "diagnostics": [],
            "trust": {"keys_file": str(keys_file)},
        },
        "detectors": {"output_corruption": {"mode": "remediate"}},
    }
    g = GuardianProcess(tmp_path, port, extra=extra)
    client = redis.client()
    try:
        sim.wait_ready(60)
        for s in impostors:
            s.wait_ready(60)
            s.set_fault("wrong_answers")  # fluent, agreeing with each other, not with the healthy server
        g.start()
        assert g.wait_ready(60), g.log_text()
        for s in impostors:
            assert g.wait_ready(60, name=f"vllm-{s.port}"), g.log_text()
        healthy = poll(lambda: ((t := g.target()) and (t.get("gates") or {}).get("baseline") == "complete") and t, 60)
        assert healthy, g.log_text()
        model, version = healthy["gates"]["model"], healthy["gates"]["version"]
        assert poll(lambda: client.hexists(key_for(model, version), f"{NODE}/sim"), 30), g.log_text()

        ready_url = f"http://127.0.0.1:{http_port}/targets/sim/ready"
        with Watcher(g, ready_url) as watch, HonestNodes(client, model, version):
            pipe = client.pipeline(transaction=False)
            for i in range(JUNK):
                pipe.hset(key_for(model, version), *junk(i))
            pipe.execute()
            # the junk is deleted and counted, and the two honest nodes vote again
            cleaned = poll(
                lambda: (
                    (st := g.status()) and sum((st["gates"].get("fingerprints_deleted") or {}).values()) >= JUNK and st
                ),
                60,
            )
            assert cleaned, (json.dumps((g.status() or {}).get("gates")), client.hlen(key_for(model, version)))
            voted = poll(lambda: g.require_target()["gates"]["agreement"] == "agree (2 peer(s))", 30)
            assert voted, g.require_target()["gates"]
            # more rounds than condition C needs (3), with the impostors agreeing against it all along
            first_rounds = g.require_target()["gates"]["rounds"]
            assert poll(lambda: g.require_target()["gates"]["rounds"] >= first_rounds + 8, 90), g.log_text()

        gates = g.status()["gates"]  # type: ignore[index]
        deleted = gates["fingerprints_deleted"]
        assert deleted["malformed"] >= 4 * JUNK // 5 and deleted["unsigned"] >= JUNK // 5, deleted
        left = set(client.hkeys(key_for(model, version)))
        assert not {f for f in left if "evil" in f or "junk" in f}, sorted(left)[:10]

        # zero wrong actions: readiness never turned, no incident, no drain, no stop, the same server
        assert watch.checks >= 5 and watch.failures == [], watch.failures[:5]
        t = g.require_target()
        assert t["gates"]["failures"] == [] and t["gates"]["failures_by_level"].get("L4") is None, t["gates"]
        assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t.get("remediation")
        assert sims_on(port) == [sim.pid]
        mine = [i for i in g.incidents() if i["target"]["name"] == "sim"]
        assert mine == [], mine
    finally:
        g.stop()
        for s in (sim, *impostors):
            s.stop()
        redis.stop()
        sweep(port)

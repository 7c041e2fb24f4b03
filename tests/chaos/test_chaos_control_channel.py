"""A hostile neighbour on the control channel (``guardian:control``): forged unsigned drains for
this node's target, drains signed with the wrong key, the guardian's own drain and undrain
captured and replayed or altered, stamps from the future and the past, a key holder speaking for
this node, deep, huge and binary junk, a flood — against a real ``guardian run`` with trust keys in
remediate mode beside a healthy simulated vLLM, on a real Redis.

What must hold: what the guardian announces is signed (a consumer can verify it); every hostile
message is bounded, dropped and counted by its reason (status ``trust.control_messages`` and
Prometheus ``guardian_control_messages_total``), a flood is one log line; the guardian acts on
none of them (no drain, no stop, the same server serves); readiness and status answer throughout.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.wait import poll
from tests.chaos.chaos_util import Watcher
from vllm_guardian.gates.trust import Keys, check, sign
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.surface.control_socket import request
from vllm_guardian.testing.redis_server import RedisServer

NODE = "node-a"
SECRET = "chaos-control-secret-0123456789"
KEYS = Keys({"ops": SECRET.encode()}, "ops")
FORGER = Keys({"ops": b"not-the-secret-0123456789"}, "ops")
FLOOD = 1000


def announced(pubsub, action: str) -> dict:
    """The next message on the subscription with this action (the guardian's announcement)."""

    def one() -> dict | None:
        m = pubsub.get_message(timeout=0.2)
        if m and m["type"] == "message":
            msg = json.loads(m["data"])
            return msg if msg.get("action") == action else None
        return None

    got = poll(one, 30, every=0.01)
    assert got is not None, f"no {action} announced"
    return got


def test_a_hostile_neighbour_on_the_control_channel_makes_the_guardian_do_nothing_wrong(tmp_path):
    port, http_port = free_port(), free_port()
    keys_file = tmp_path / "trust.keys"
    keys_file.write_text(f"ops {SECRET}\n")
    os.chmod(keys_file, 0o600)
    redis = RedisServer().start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    extra = {
        "node": NODE,
        "targets": [command_restart(port, tmp_path)],
        "alerts": {"redis_url": redis.url},
        "api": {"http": f"127.0.0.1:{http_port}"},
        "gates": {"trust": {"keys_file": str(keys_file)}},  # gates off: the keys sign control messages all the same
        "detectors": {"busy_loop": {"mode": "remediate"}, "engine_stall": {"mode": "remediate"}},
    }
    g = GuardianProcess(tmp_path, port, extra=extra)
    client = redis.client()
    sub = client.pubsub()
    sub.subscribe("guardian:control")
    sock = str(g.state_dir / "guardian.sock")
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        assert poll(lambda: client.pubsub_numsub("guardian:control")[0][1] >= 2, 20), g.log_text()  # it listens

        # what the guardian announces is signed: a load balancer controller can verify it
        assert request(sock, {"cmd": "drain", "target": "sim"}) == "sim: drain started"
        drain = announced(sub, "drain")
        assert request(sock, {"cmd": "undrain", "target": "sim"}) == "sim: back in rotation"
        undrain = announced(sub, "undrain")
        assert check(drain, KEYS) is None and check(undrain, KEYS) is None
        assert (drain["node"], drain["target"]) == (NODE, "sim") and drain["id"] != undrain["id"]
        assert poll(lambda: (g.require_target())["serving"], 30), g.log_text()
        pub = lambda m: client.publish("guardian:control", m if isinstance(m, (str, bytes)) else json.dumps(m))  # noqa: E731

        with Watcher(g, f"http://127.0.0.1:{http_port}/targets/sim/ready") as watch:
            unsigned = {k: v for k, v in drain.items() if k not in ("kid", "sig")}
            for i in range(FLOOD):  # forged drains for this node's target, each a new id
                pub(unsigned | {"id": f"{i:016x}", "timestamp": int(time.time())})
            pub(sign(unsigned | {"id": "b" * 16}, FORGER))  # the wrong key
            pub(drain)  # the guardian's own drain, captured and replayed after the undrain
            pub(undrain | {"action": "drain"})  # its undrain, altered after signing
            now = int(time.time())
            pub(sign(unsigned | {"id": "c" * 16, "timestamp": now + 3600}, KEYS))  # from the future
            pub(sign(unsigned | {"id": "d" * 16, "timestamp": now - 3600}, KEYS))  # long stale
            pub(sign(unsigned | {"id": "e" * 16, "timestamp": now}, KEYS))  # a key holder speaking for this node
            pub("[" * 5000)
            pub("x" * 200_000)
            pub(b"\xff\xfe not utf-8")
            pub(json.dumps(unsigned | {"target": "t" * 10_000}))
            hostile = FLOOD + 10
            counted = poll(
                lambda: (
                    (st := g.status())
                    and sum((st.get("trust", {}).get("control_messages") or {}).values()) >= hostile + 2
                    and st
                ),
                60,
            )
            assert counted, (g.status() or {}).get("trust")
            assert poll(lambda: watch.checks >= 3, 30)  # readiness and status asked during and after it

        msgs = counted["trust"]["control_messages"]
        assert msgs["own"] == 2 and msgs["accepted"] == 0
        assert msgs["unsigned"] == FLOOD and msgs["bad_signature"] == 2 and msgs["replay"] == 1
        assert msgs["future"] == 1 and msgs["stale"] == 1 and msgs["not_ours"] == 1 and msgs["malformed"] == 4
        assert counted["trust"]["kids"] == ["ops"] and SECRET not in json.dumps(counted)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert f'guardian_control_messages_total{{outcome="unsigned"}} {float(FLOOD)}' in metrics

        # nothing was acted on: readiness never turned, the same server serves, no restart
        assert watch.checks >= 3 and watch.failures == [], watch.failures[:5]
        t = g.require_target()
        assert t["serving"] and t["phase"] == "serving", t
        assert sims_on(port) == [sim.pid]
        assert not [i for i in g.incidents() if [a for a in i["actions"] if a["name"] in ("stop", "start")]]
        log = g.log_text()
        assert log.count("control message unsigned") == 1  # once per episode, not 1000 lines
        assert SECRET not in log
    finally:
        sub.close()
        g.stop()
        sim.stop()
        redis.stop()
        sweep(port)

"""A hostile neighbour on the shared Redis: forged, replayed, future-stamped and badly signed
reports, deep and huge JSON, a flood of messages and unknown names, forged L4 fingerprints —
against a real ``guardian run`` in remediate mode (with trust keys and a restart it could do)
beside a healthy simulated vLLM, on a real Redis.

What must hold: no drain, no stop, no restart of the healthy server; readiness and status
answer throughout; every real (signed) report is still counted; every hostile one is dropped
and counted by its reason; the forged fingerprints never vote and are deleted.
"""

from __future__ import annotations

import json
import os
import time

from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.watcher import Watcher
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll
from vllm_guardian.config.schema import GatesConfig
from vllm_guardian.gates.exchange import key_for
from vllm_guardian.gates.trust import Keys, sign
from vllm_guardian.testing.redis_server import RedisServer

NODE = "node-a"
SECRET = "chaos-secret-0123456789"
KEYS = Keys({"gw": SECRET.encode()}, "gw")
FORGER = Keys({"gw": b"not-the-secret-0123456789"}, "gw")
REAL = 6  # signed reports from a real gateway: each must be counted


def report(target: str = "sim", rid: str = "r", t: float | None = None, **kw) -> dict:
    m = {
        "instance_id": f"{NODE}/{target}",
        "request_id": rid,
        "timestamp": int(time.time() if t is None else t),
        "check_level": "L1",
        "type": "repeated_chars",
        "details": {"output": "!!!!!!!!!!!!"},
    }
    m.update(kw)
    return m


def drain_messages(pubsub) -> list[dict]:
    """Every message the subscription holds now (subscribe confirmations left out)."""
    out = []
    while (m := pubsub.get_message(timeout=1)) is not None:
        if m["type"] == "message":
            out.append(m)
    return out


def test_a_hostile_neighbour_on_redis_makes_the_guardian_do_nothing_wrong(tmp_path):
    port, http_port = free_port(), free_port()
    keys_file = tmp_path / "trust.keys"
    keys_file.write_text(f"gw {SECRET}\n")
    os.chmod(keys_file, 0o600)
    redis = RedisServer().start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    extra = {
        "node": NODE,
        "targets": [command_restart(port, tmp_path)],
        "alerts": {"redis_url": redis.url},
        "api": {"http": f"127.0.0.1:{http_port}"},
        "gates": {
            "enabled": True,
            "interval": 2.0,
            "baseline_samples": 1,
            # reports stamped before the start + max_skew are refused (a replay across a restart)
            "trust": {"keys_file": str(keys_file), "max_skew": 3.0},
        },
        "detectors": {"output_corruption": {"mode": "remediate"}},
    }
    g = GuardianProcess(tmp_path, port, extra=extra)
    client = redis.client()
    decisions = client.pubsub()
    decisions.subscribe("vllm_control")
    try:
        sim.wait_ready(60)
        started = time.time()
        g.start()
        assert g.wait_ready(60), g.log_text()
        healthy = poll(lambda: ((t := g.target()) and (t.get("gates") or {}).get("baseline") == "complete") and t, 60)
        assert healthy, g.log_text()
        model, version = healthy["gates"]["model"], healthy["gates"]["version"]
        assert poll(lambda: client.pubsub_numsub("vllm_health_alert")[0][1] >= 1, 20), g.log_text()
        assert poll(lambda: (g.status() or {}).get("uptime_s", 0) > 4, 20)  # past start + max_skew
        pub = lambda m: client.publish("vllm_health_alert", m if isinstance(m, (str, bytes)) else json.dumps(m))  # noqa: E731

        with Watcher(g, f"http://127.0.0.1:{http_port}/targets/sim/ready") as watch:
            # forged fingerprints: two "nodes" agreeing on another answer, stamped far in the future
            fp_key = key_for(model, version)
            for evil in ("evil-1", "evil-2"):
                entry = {"node": evil, "target": "sim", "t": time.time() + 86400,
                         "fps": {p: "0" * 16 for p in GatesConfig().shadow_prompts}}  # fmt: skip
                client.hset(fp_key, f"{evil}/sim", json.dumps(entry))
                # unsigned, fresh for a while (within max_skew: not from the future)
                client.hset(fp_key, f"{evil}/x", json.dumps(dict(entry, target="x", t=time.time() + 2)))
            # the real gateway's reports, spread through the attack
            real = [sign(report(rid=f"real-{i}"), KEYS) for i in range(REAL)]
            pub(real[0])
            pub(report(rid="forged-unsigned", check_level="L3"))  # ONE forged L3 once stopped a server
            pub(sign(report(rid="forged-key", check_level="L3"), FORGER))
            pub(dict(real[0], check_level="L3"))  # tampered after signing
            pub(real[0])  # replayed
            pub(sign(report(rid="from-the-future", t=time.time() + 3600), KEYS))
            pub(sign(report(rid="ancient", t=time.time() - 3600), KEYS))
            pub(sign(report(rid="before-start", t=started - 30), KEYS))  # may have been accepted before a restart
            pub(sign(report(target="sim", rid="bare", instance_id="sim"), KEYS))  # a bare name
            pub(real[1])
            pub("[" * 5000)  # deep
            pub('{"a":' * 20000)
            pub(json.dumps(report(rid="deep-details", details={"x": json.loads("[" * 600 + "]" * 600)})))
            pub("x" * 200_000)  # huge
            pub(b"\xff\xfe not utf-8")
            for i in range(2000):  # a flood of unsigned copies
                pub(report(rid=f"flood-{i}", check_level="L3"))
            pub(real[2])
            for i in range(500):  # signed, but naming targets that do not exist here
                pub(sign(report(target=f"ghost-{i}", rid=f"g{i}"), KEYS))
            for m in real[3:]:
                pub(m)

            counted = poll(
                lambda: (
                    (st := g.status())
                    and st.get("gates", {}).get("reports", {}).get("accepted") == REAL
                    and st["gates"]["reports"].get("unknown_target") == 500
                    and st
                ),
                60,
            )
            assert counted, (g.status() or {}).get("gates")
            # a few more gate rounds with the forged fingerprints in place, the incident held
            first_rounds = g.require_target()["gates"]["rounds"]
            assert poll(lambda: g.require_target()["gates"]["rounds"] >= first_rounds + 3, 60), g.log_text()
            assert poll(lambda: watch.checks >= 5, 60)  # asked often enough, however slow the machine

        gates = g.status()["gates"]  # type: ignore[index]
        dropped = gates["reports_dropped"]
        assert gates["reports"]["accepted"] == REAL
        assert dropped["unsigned"] >= 2001 and dropped["bad_signature"] >= 2 and dropped["replay"] >= 1
        assert dropped["future"] >= 1 and dropped["stale"] >= 1 and dropped["no_node"] >= 1
        assert dropped["before_start"] >= 1
        assert dropped["malformed"] >= 5 and dropped["unknown_target"] == 500
        assert len(gates["unknown_targets"]) <= 32
        fps = gates["fingerprints_dropped"]
        assert fps["future"] >= 2 and fps["unsigned"] >= 2
        assert not client.hexists(fp_key, "evil-1/sim")  # deleted, not kept alive by anyone's EXPIRE

        # zero wrong actions: readiness never turned, no drain, no stop, the same server serves
        assert watch.checks >= 5 and watch.failures == [], watch.failures[:5]
        t = g.require_target()
        assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t.get("remediation")
        assert sims_on(port) == [sim.pid]
        for inc in g.incidents():
            assert not [a for a in inc["actions"] if a["name"] in ("drain", "stop", "start", "restart")], inc
        # the 6 real L1 reports make condition A: an alert, held until the guardian's own round fails
        assert [i for i in g.incidents() if i["kind"] == "output_corruption"], g.log_text()
        assert "alert only until the guardian's own confirming gate round fails" in g.log_text()
        assert g.log_text().count("gate report unsigned") == 1  # once per episode, not 2001 lines
        # and the decisions published say so: alert only, held on the external evidence
        said = [json.loads(m["data"]) for m in drain_messages(decisions)]
        said = [m for m in said if m.get("type") == "decision"]
        assert said and {(m["decision"], m.get("hold_reason")) for m in said} == {("alert_only", "external")}
    finally:
        decisions.close()
        g.stop()
        sim.stop()
        redis.stop()
        sweep(port)

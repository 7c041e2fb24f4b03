"""Live: ``guardian run`` with gates on, against a real simulated vLLM server, on a real Redis.

Garbage answers open an ``output_corruption`` incident carrying level, condition and the
failing sample, and its decision is published on the control channel — what the guardian
decided: in remediate mode but dry run, ``alert_only`` held ``dry_run``, and nothing drained; a
gateway's report on the reports channel opens one too; a malformed report is only counted.
"""

from __future__ import annotations

import json
import threading

import pytest

from vllm_guardian.gates.gateway import Reporter, check_text
from vllm_guardian.testing.redis_server import RedisServer
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.guardian_process import GuardianProcess, command_restart, sims_on
from tests.support.wait import poll

pytestmark = pytest.mark.live


@pytest.fixture
def redis_server():
    with RedisServer() as r:
        yield r


def gates_config(port: int, redis_url: str, **gates) -> dict:
    g = {
        "enabled": True,
        "interval": 1.0,
        "diagnostics": [{"prompt": "1+1=", "expect": "^\\s*2", "max_tokens": 4}],
        "baseline_samples": 1,
        "trust": {"max_skew": 1.0},  # reports stamped before the start + max_skew are refused
    }
    g.update(gates)
    return {
        "node": "node-a",
        "alerts": {"redis_url": redis_url},
        "gates": g,
        "probes": {"canary": {"interval": 2.0}},
        "detectors": {"output_corruption": {"mode": "alert"}},
    }


def listen(client, channel: str) -> list[dict]:
    heard: list[dict] = []
    pubsub = client.pubsub()
    pubsub.subscribe(channel)

    def run():  # polls: the client's socket timeout would end a blocking listen() while all is quiet
        keep = client  # noqa: F841 - a collected client closes its pool, and this subscription with it
        while True:
            try:
                msg = pubsub.get_message(timeout=0.5)
            except Exception:  # noqa: BLE001 - the server is gone at the end of the test
                return
            if msg and msg["type"] == "message":
                heard.append(json.loads(msg["data"]))

    threading.Thread(target=run, daemon=True).start()
    return heard


def test_garbage_answers_open_output_corruption_and_publish_the_decision(tmp_path, redis_server):
    port = free_port("127.0.0.1")
    decisions = listen(redis_server.client(), "vllm_control")
    with SimServer(port=port, startup_delay=0.5).start() as sim:
        sim.wait_ready(30)
        g = GuardianProcess(tmp_path, port, extra=gates_config(port, redis_server.url)).start()
        try:
            assert g.wait_ready(30), g.log_text()
            healthy = poll(lambda: (t := g.target()) and (t.get("gates") or {}).get("baseline") == "complete" and t, 30)
            assert healthy and healthy["gates"]["health_score"] == 100, g.log_text()
            sim.set_fault("repeat_chars")
            inc = g.wait_incident("output_corruption", 30)
            assert inc is not None, g.log_text()
            assert inc["signals"]["condition"] == "A" and inc["signals"]["level"] == "L1"
            assert inc["signals"]["sample"]["output"].startswith("!!!!")
            assert poll(lambda: any(d["decision"] == "alert_only" and d["condition"] == "A" for d in decisions), 20), (
                decisions,
                g.log_text(),
            )
            t = g.target()
            assert t is not None and t["gates"]["health_score"] <= 20
        finally:
            g.stop()


def test_in_dry_run_the_published_decision_is_alert_only_held_dry_run_and_nothing_is_drained(tmp_path, redis_server):
    """A dry-run guardian once published ``drain_and_restart`` for an incident it never acted on."""
    port = free_port("127.0.0.1")
    decisions = listen(redis_server.client(), "vllm_control")
    extra = gates_config(port, redis_server.url) | {
        "targets": [command_restart(port, tmp_path)],
        "policy": {"dry_run": True},
        "detectors": {"output_corruption": {"mode": "remediate"}},
    }
    with SimServer(port=port, startup_delay=0.5).start() as sim:
        sim.wait_ready(30)
        g = GuardianProcess(tmp_path, port, extra=extra).start()
        try:
            assert g.wait_ready(30), g.log_text()
            assert poll(lambda: (t := g.target()) and (t.get("gates") or {}).get("baseline") == "complete", 30)
            sim.set_fault("repeat_chars")
            assert g.wait_incident("output_corruption", 30) is not None, g.log_text()
            said = poll(lambda: [d for d in decisions if d["type"] == "decision"], 20)
            assert said, (decisions, g.log_text())
            assert (said[0]["decision"], said[0]["hold_reason"]) == ("alert_only", "dry_run"), said
            assert "would have drained" in said[0]["hold"]
            t = g.require_target()
            assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t
            assert sims_on(port) == [sim.pid]
            assert not [d for d in decisions if d["decision"] == "drain_and_restart"], decisions
        finally:
            g.stop()


def test_a_gateway_report_opens_output_corruption_and_bad_reports_are_only_counted(tmp_path, redis_server):
    port = free_port("127.0.0.1")
    with SimServer(port=port, startup_delay=0.5).start() as sim:
        sim.wait_ready(30)
        g = GuardianProcess(tmp_path, port, extra=gates_config(port, redis_server.url, interval=3600.0)).start()
        try:
            assert g.wait_ready(30), g.log_text()
            client = redis_server.client()
            assert poll(lambda: client.pubsub_numsub("vllm_health_alert")[0][1] >= 1, 20), g.log_text()
            assert poll(lambda: (g.status() or {}).get("uptime_s", 0) > 2, 20)  # past start + max_skew
            client.publish("vllm_health_alert", "not json")
            client.publish(
                "vllm_health_alert",
                json.dumps(
                    {
                        "instance_id": "node-a/nobody",
                        "request_id": "r",
                        "timestamp": 1e9 * 1.7,
                        "check_level": "L1",
                        "type": "x",
                        "details": {},
                    }
                ),
            )
            counted = poll(
                lambda: (
                    (st := g.status()) and (st.get("gates") or {}).get("reports", {}).get("unknown_target") == 1 and st
                ),
                20,
            )
            assert counted and counted["gates"]["reports"]["malformed"] == 1
            assert not [i for i in g.incidents() if i["kind"] == "output_corruption"]
            Reporter(client=client).report(
                "node-a/sim", "req-77", check_text("\x00\x00 nan \ufffd"), output="\x00\x00", prompt="hi"
            )
            from vllm_guardian.gates.gateway import check_logprobs

            Reporter(client=client).report("node-a/sim", "req-78", check_logprobs([float("nan")], [[float("nan")]]))
            inc = g.wait_incident("output_corruption", 20)
            assert inc is not None, g.log_text()
            assert inc["signals"]["condition"] == "B" and inc["signals"]["level"] == "L3"
            assert inc["signals"]["sample"]["figures"]["reported_by"] == "req-78"
            log = g.log_text()
            assert log.count("gate report malformed") == 1 and log.count("gate report unknown_target") == 1
        finally:
            g.stop()

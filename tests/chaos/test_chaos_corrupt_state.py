"""Every state file damaged before the guardian starts: incidents (garbage, binary, a JSON nest
100 000 deep), the alert spool (torn and garbage lines between good ones), remediation state,
maintenance, the restart ledger (which then refuses restarts, and says so). The guardian starts,
watches its target, delivers the good spooled alerts and names what it skipped; nothing is lost that was readable."""

from __future__ import annotations

import json

from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
from vllm_guardian.sinks.redis_client import make_client

from tests.support.guardian_process import GuardianProcess, sweep
from vllm_guardian.sim.control import SimServer, free_port
from tests.support.wait import poll
from tests.support.redis_procs import kill_all, servers_for


def seed(state):
    inc = state / "incidents"
    for name, body in {
        "01HF7Z9GDG0TRA5GW6MSKGM001": b"{not json",
        "01HF7Z9GDG0TRA5GW6MSKGM002": b"\x00\xff\xfe" * 100,
        "01HF7Z9GDG0TRA5GW6MSKGM003": b"[" * 100_000 + b"]" * 100_000,
        "01HF7Z9GDG0TRA5GW6MSKGM004": json.dumps({"id": 4, "kind": []}).encode(),
    }.items():
        (inc / name).mkdir(parents=True)
        (inc / name / "incident.json").write_bytes(body)
    spool = state / "spool"
    spool.mkdir(parents=True)
    good = [json.dumps({"id": f"OLD{i}", "kind": "chaos"}) for i in range(3)]
    (spool / "events.jsonl").write_text(f'{good[0]}\n{{torn\n\x00garbage\n{good[1]}\n{good[2]}\n{{"id":"cut')
    (state / "remediation").mkdir()
    (state / "remediation" / "sim.json").write_text('{"target": "sim", "phase": ')
    (state / "maintenance.json").write_text("[[[")
    (state / "restarts.json").write_text('{"sim": [1.0, "x"')  # the restart ledger, cut short


def test_a_guardian_on_damaged_state_starts_watches_and_delivers_what_was_readable(tmp_path):
    port = free_port()
    sim = SimServer(port=port, startup_delay=0.5).start()
    g = GuardianProcess(tmp_path, port)
    seed(g.state_dir)
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        client = make_client(EmbeddedRedis(str(g.state_dir)).url)
        got = poll(
            lambda: (
                [f["id"] for _, f in client.xrange("guardian:alerts") if f["id"].startswith("OLD")]
                == ["OLD0", "OLD1", "OLD2"]
            ),
            20,
        )
        assert got, g.log_text()
        log = g.log_text()
        assert "Traceback" not in log, log
        assert "remediation state" in log and "incident file" in log
        assert "restart ledger" in log and "refusing every restart" in log  # fail closed, and said
    finally:
        sim.stop()
        assert g.stop() == 0
        sweep(port)
        kill_all(servers_for(g.state_dir))

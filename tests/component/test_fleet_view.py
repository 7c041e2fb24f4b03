"""The fleet view through a real Redis, written by the store's own writers (heartbeats, the alert
delivery script, the group lease): nodes × targets, open incidents, restarts in the window counted
once, groups, per-model health; hostile records shown bounded; text, JSON and the page."""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

import pytest

from vllm_guardian.cli.main import main
from vllm_guardian.sinks.events import rfc3339
from vllm_guardian.sinks.fleet import NodeHeartbeat
from vllm_guardian.sinks.fleet_view import read_fleet, render_text
from vllm_guardian.sinks.group_lease import GroupLease
from vllm_guardian.sinks.group_record import group_key
from vllm_guardian.sinks.redis_delivery import RedisDelivery
from vllm_guardian.surface.fleet_html import render_fleet_html
from vllm_guardian.testing.redis_server import RedisServer

STREAM = "guardian:alerts"
NOW = time.time()


@pytest.fixture
def client():
    with RedisServer() as s:
        c = s.client()
        c.url = s.url  # for the CLI test
        yield c


def heartbeat(client, node: str, targets: list[dict[str, Any]], incidents: Sequence[dict[str, Any]] = ()) -> None:
    doc = {
        "version": "1.0",
        "time": NOW - 3,
        "targets": targets,
        "incidents": list(incidents),
        "alerts": {"spooled": 0},
    }
    NodeHeartbeat(client).write(node, doc, 30)


def target(name: str, phase: str = "serving", model: str = "llama", incidents=()) -> dict[str, Any]:
    """A target of a heartbeat as ``node_summary`` writes it (``incidents``: the kinds of its open ones)."""
    return {"name": name, "phase": phase, "pid": 1, "port": 8000, "model": model, "incidents": list(incidents)}


_seq = iter(range(1, 10**6))


def event(node: str, tgt: str, incident: str, actions: list[tuple[str, float]], *, at: float = NOW) -> dict[str, Any]:
    """An alert event as the guardian writes it (the fields the view reads), with its restart actions."""
    return {
        "id": f"{int(at * 1000):013d}-{next(_seq)}",
        "incident_id": incident,
        "node": node,
        "target": {"name": tgt},
        "kind": "busy_loop",
        "status": "firing",
        "actions": [{"name": name, "status": "ok", "at": rfc3339(when), "detail": ""} for name, when in actions],
    }


def deliver(client, node: str, *events: dict[str, Any]) -> None:
    d = RedisDelivery(client, node=node, stream=STREAM, channel=None, maxlen=100_000)
    for e in events:
        d.deliver(e)


# ---------------------------------------------------------------- what the view shows
def test_nodes_and_targets_with_their_phase_and_open_incident_kinds(client):
    heartbeat(
        client,
        "gpu-1",
        [target("a", "incident", incidents=["busy_loop"]), target("b")],
        [{"id": "I1", "kind": "busy_loop", "severity": "critical", "target": "a", "opened_at": NOW - 60}],
    )
    heartbeat(client, "gpu-2", [target("a", "warming", model="qwen")])
    view = read_fleet(client, stream=STREAM, now_wall=NOW)
    rows = [(t.node, t.name, t.phase, t.incidents) for t in view.targets]
    assert rows == [
        ("gpu-1", "a", "incident", ("busy_loop",)),
        ("gpu-1", "b", "serving", ()),
        ("gpu-2", "a", "warming", ()),
    ]


def test_restarts_in_the_window_are_counted_once_per_incident(client):
    heartbeat(client, "gpu-1", [target("a")])
    first, second, old = NOW - 3600, NOW - 600, NOW - 30 * 3600
    deliver(
        client,
        "gpu-1",
        event("gpu-1", "a", "I1", [("evidence", first), ("stop", first)], at=first),
        event("gpu-1", "a", "I1", [("evidence", first), ("stop", first)], at=first + 5),  # the same restart again
        event("gpu-1", "a", "I2", [("stop", old), ("stop", second)], at=second),  # one before the window
    )
    view = read_fleet(client, stream=STREAM, now_wall=NOW)
    assert [t.restarts for t in view.targets] == [2]
    assert (view.events_read, view.events_cut) == (3, False)


def test_a_window_with_more_events_than_the_cap_is_said_to_be_cut(client):
    heartbeat(client, "gpu-1", [target("a")])
    deliver(client, "gpu-1", *(event("gpu-1", "a", f"I{i}", [("stop", NOW - 10)]) for i in range(5)))
    view = read_fleet(client, stream=STREAM, now_wall=NOW, max_events=3)
    assert (view.events_read, view.events_cut, view.targets[0].restarts) == (3, True, 3)
    assert "restart counts are a floor" in render_text(view)


def test_groups_show_the_nodes_with_a_record_and_the_lease_holder(client):
    client.hset(group_key("llama-tp4"), mapping={"gpu-1": "{}", "gpu-2": "{}"})
    GroupLease(client, "gpu-2").acquire("llama-tp4", 30)
    view = read_fleet(client, stream=STREAM, now_wall=NOW)
    assert [(g.group, g.nodes, g.lease) for g in view.groups] == [("llama-tp4", ("gpu-1", "gpu-2"), "gpu-2")]


def test_each_model_health_joins_its_targets_across_nodes(client):
    heartbeat(
        client,
        "gpu-1",
        [target("a", "incident", incidents=["engine_stall"]), target("b", model="qwen")],
        [{"id": "I1", "kind": "engine_stall", "target": "a"}],
    )
    heartbeat(client, "gpu-2", [target("a")])
    deliver(client, "gpu-1", event("gpu-1", "a", "I1", [("stop", NOW - 5)]))
    models = {m.model: m for m in read_fleet(client, stream=STREAM, now_wall=NOW).models}
    assert (models["llama"].targets, models["llama"].serving, models["llama"].with_incident) == (2, 1, 1)
    assert (models["llama"].kinds, models["llama"].restarts) == (("engine_stall",), 1)
    assert (models["qwen"].targets, models["qwen"].serving) == (1, 1)


# ---------------------------------------------------------------- hostile records
def test_hostile_heartbeats_and_events_are_shown_bounded_never_fatal(client):
    client.set("guardian:node:bad-json", "{not json", ex=30)
    client.set("guardian:node:wrong-shapes", json.dumps({"targets": "x", "incidents": 5, "time": True}), ex=30)
    heartbeat(client, "long", [{"name": "n" * 10_000, "phase": ["x"], "incidents": [{"a": 1}]}])
    client.xadd(STREAM, {"id": "x", "event": "{not json"})
    client.xadd(STREAM, {"id": "y", "event": json.dumps({"actions": "x", "target": 5})})
    client.xadd(STREAM, {"id": "z", "event": json.dumps({"actions": [{"name": "stop", "at": "yesterday"}]})})
    view = read_fleet(client, stream=STREAM, now_wall=NOW)
    assert [n.node for n in view.nodes] == ["bad-json", "long", "wrong-shapes"]
    assert view.nodes[0].error == "unreadable heartbeat"
    assert len(view.nodes[1].targets[0].name) == 128 and view.nodes[1].targets[0].incidents == ("{'a': 1}",)
    assert view.nodes[2].targets == () and view.events_read == 3
    render_text(view)
    assert "<script>" not in render_fleet_html(view)


def test_the_page_escapes_what_the_store_holds_and_has_the_incident_pages_look(client):
    heartbeat(client, "<script>alert(1)</script>", [target("<b>x</b>", model="<i>m</i>")])
    page = render_fleet_html(read_fleet(client, stream=STREAM, now_wall=NOW))
    assert "<script>alert" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    from vllm_guardian.diagnosis.report_html import CSS

    assert CSS in page and "id='targets'" in page and "id='models'" in page


# ---------------------------------------------------------------- the command
def test_guardian_fleet_prints_text_json_and_writes_the_page(client, tmp_path, capsys):
    heartbeat(client, "gpu-1", [target("a")])
    cfg = tmp_path / "g.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    assert main(["fleet", "-c", str(cfg), "--redis", client.url]) == 0
    assert "gpu-1" in capsys.readouterr().out
    assert main(["fleet", "-c", str(cfg), "--redis", client.url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"][0]["targets"][0]["phase"] == "serving" and doc["models"][0]["model"] == "llama"
    page = tmp_path / "fleet.html"
    assert main(["fleet", "-c", str(cfg), "--redis", client.url, "--html", str(page)]) == 0
    assert "gpu-1" in page.read_text()

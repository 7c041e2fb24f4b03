"""The Alertmanager push: an event as an API v2 alert, every instance sent every alert, spooled while
one is down, refused alerts dropped and counted, firing alerts re-sent with a fresh horizon, the
old label set resolved when the labels change, and the config's URLs checked."""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import replace
from typing import Any, Sequence

import pytest

from vllm_guardian.config.loader import ConfigError, parse_config
from vllm_guardian.incidents.ids import IdGenerator
from vllm_guardian.model import Severity, Transition
from vllm_guardian.sinks.alertmanager_client import Outcome, alerts_url
from vllm_guardian.sinks.alertmanager_payload import ALERTNAME, alert_of, stamped
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerSink, spool_dir
from vllm_guardian.sinks.events import AlertEmitter, rfc3339
from tests.unit.test_events import OPENED, incident, resolved_incident

A, B = "http://am-a:9093", "http://am-b:9093"


def emitter() -> AlertEmitter:
    return AlertEmitter("gpu-1", 3600.0, ids=IdGenerator(), list_files=lambda d: [])


def opened() -> dict[str, Any]:
    return emitter().on_transition(Transition(incident(), None), OPENED, 0.0)


def resolved() -> dict[str, Any]:
    return emitter().on_transition(Transition(resolved_incident(), None), OPENED + 60, 60.0)


class Instances:
    """What each Alertmanager URL answers (``answer[url]``) and every post it got (``posts[url]``)."""

    def __init__(self, *urls: str) -> None:
        self.answer = {u: Outcome("sent", "HTTP 200") for u in urls}
        self.posts: dict[str, list[list[dict]]] = {u: [] for u in urls}
        self.lock = threading.Lock()

    def post(self, url: str, alerts: Sequence[Any], timeout: float) -> Outcome:
        with self.lock:
            self.posts[url].append(list(alerts))
            return self.answer[url]

    def alerts(self, url: str) -> list[dict]:
        return [a for post in self.posts[url] for a in post]


def sink(tmp_path, world: Instances, *urls: str, wall: float = OPENED + 1, mono: list[float] | None = None):
    clock = mono if mono is not None else [0.0]
    return AlertmanagerSink(
        urls,
        tmp_path,
        max_events=100,
        max_bytes=1 << 20,
        resend_interval=60.0,
        timeout=1.0,
        post=world.post,
        wall=lambda: wall,
        monotonic=lambda: clock[0],
        start=False,
    )


# ---------------------------------------------------------------- the alert
def test_the_labels_identify_node_target_kind_and_severity():
    assert alert_of(opened())["labels"] == {
        "alertname": ALERTNAME,
        "node": "gpu-1",
        "target": "llama",
        "kind": "busy_loop",
        "severity": "critical",
        "model": "tiny-llama",
    }


def test_the_annotations_carry_summary_runbook_and_evidence():
    notes = alert_of(opened())["annotations"]
    assert notes["summary"] == "EngineCore main thread spinning"
    assert notes["runbook_url"].endswith("/docs/runbooks/busy_loop.md")
    assert notes["evidence"] == "gpu-1:/var/lib/vllm_guardian/incidents/X"
    assert notes["incident_id"] == incident().id
    assert "last action: evidence ok" in notes["description"]


def test_a_firing_alert_is_stamped_valid_for_four_resend_intervals_when_sent():
    alert = alert_of(opened())
    assert alert["endsAt"] is None and alert["startsAt"] == rfc3339(OPENED)
    assert stamped([alert], OPENED + 10, 60.0)[0]["endsAt"] == rfc3339(OPENED + 10 + 240)


def test_a_resolved_alert_ends_when_the_incident_resolved():
    alert = alert_of(resolved())
    assert alert["endsAt"] == rfc3339(OPENED + 60)
    assert stamped([alert], OPENED + 999, 60.0)[0]["endsAt"] == rfc3339(OPENED + 60)


def test_a_huge_outside_string_is_clipped_in_labels_and_annotations():
    ev = opened()
    ev["summary"], ev["target"]["model"] = "s" * 100_000, "m" * 10_000
    alert = alert_of(ev)
    assert len(alert["labels"]["model"]) == 256 and len(alert["annotations"]["summary"]) == 4096


@pytest.mark.parametrize(
    "base, url",
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("https://am.example/alertmanager/", "https://am.example/alertmanager/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"),
    ],
)
def test_the_post_goes_to_the_v2_alerts_path_under_any_route_prefix(base, url):
    assert alerts_url(base) == url


# ---------------------------------------------------------------- every instance, spooled, retried
def test_every_instance_receives_every_alert(tmp_path):
    world = Instances(A, B)
    s = sink(tmp_path, world, A, B)
    s.publish(opened())
    s.publish(resolved())
    for inst in s.instances:
        assert inst.flush_once()
    for url in (A, B):
        assert [a["endsAt"] is None for a in world.alerts(url)] == [False, False]  # stamped, then resolved
        assert [a["annotations"]["summary"] for a in world.alerts(url)] == ["EngineCore main thread spinning"] * 2
    assert s.status_section().firing == 0


def test_one_instance_down_keeps_its_alerts_spooled_and_holds_back_no_other(tmp_path):
    world = Instances(A, B)
    world.answer[B] = Outcome("retry", "HTTP 503: down")
    s = sink(tmp_path, world, A, B)
    s.publish(opened())
    a, b = s.instances
    assert a.flush_once() and not b.flush_once()
    assert (len(a.spool), len(b.spool)) == (0, 1)
    status = {i.url: i for i in s.status_section().instances}
    assert not status[B].up and status[B].last_error == "HTTP 503: down" and status[B].failures_total == 1
    world.answer[B] = Outcome("sent", "HTTP 200")
    assert b.flush_once() and len(b.spool) == 0
    assert world.alerts(B)[-1]["labels"] == world.alerts(A)[0]["labels"]


def test_the_spool_outlives_the_guardian(tmp_path):
    world = Instances(A)
    world.answer[A] = Outcome("retry", "refused")
    s = sink(tmp_path, world, A)
    s.publish(opened())
    s.close()
    assert spool_dir(tmp_path, A).is_dir()
    world.answer[A] = Outcome("sent", "HTTP 200")
    again = sink(tmp_path, world, A)
    assert again.instances[0].flush_once()
    assert world.alerts(A)[-1]["labels"]["kind"] == "busy_loop"


def test_an_alert_the_instance_refuses_is_dropped_and_counted_not_retried_forever(tmp_path):
    world = Instances(A)
    world.answer[A] = Outcome("rejected", "HTTP 400: bad alert")
    s = sink(tmp_path, world, A)
    s.publish(opened())
    assert s.instances[0].flush_once()
    st = s.status_section().instances[0]
    assert (st.spooled, st.rejected_total, st.sent_total) == (0, 1, 0)


def test_renotifications_are_not_spooled_the_resend_covers_them(tmp_path):
    s = sink(tmp_path, Instances(A), A)
    s.publish({**opened(), "reason": "renotify"})
    assert len(s.instances[0].spool) == 0


# ---------------------------------------------------------------- resend while firing
def test_firing_alerts_are_resent_each_interval_with_a_fresh_horizon(tmp_path):
    world, mono = Instances(A), [0.0]
    s = sink(tmp_path, world, A, mono=mono)
    assert s.resend_due()
    s.resend([opened()])
    assert not s.resend_due()
    assert s.instances[0].flush_once()
    assert world.alerts(A)[0]["endsAt"] == rfc3339(OPENED + 1 + 240)
    mono[0] = 60.0
    assert s.resend_due()


def test_a_resolved_incident_is_not_resent(tmp_path):
    world = Instances(A)
    s = sink(tmp_path, world, A)
    s.resend([opened()])
    s.publish(resolved())
    assert s.instances[0].flush_once()
    assert [a["endsAt"] for a in world.alerts(A)] == [rfc3339(OPENED + 60)]


def test_a_changed_label_set_resolves_the_old_one_first(tmp_path):
    world = Instances(A)
    s = sink(tmp_path, world, A)
    s.publish(opened())
    rose = emitter().on_transition(Transition(replace(incident(), severity=Severity.WARNING), None), OPENED, 0.0)
    s.publish(rose)
    assert s.instances[0].flush_once()
    sent = [(a["labels"]["severity"], a["endsAt"]) for a in world.alerts(A)]
    assert sent == [
        ("critical", rfc3339(OPENED + 1 + 240)),
        ("critical", rfc3339(OPENED + 1)),  # ended now
        ("warning", rfc3339(OPENED + 1 + 240)),
    ]


def test_the_flusher_threads_deliver_without_being_asked(tmp_path):
    world = Instances(A, B)
    s = AlertmanagerSink(
        (A, B), tmp_path, max_events=10, max_bytes=1 << 20, resend_interval=60, timeout=1, post=world.post
    )
    try:
        s.publish(opened())
        deadline = threading.Event()
        for _ in range(200):
            if all(world.alerts(u) for u in (A, B)):
                break
            deadline.wait(0.02)
        assert all(world.alerts(u) for u in (A, B))
    finally:
        s.close()


# ---------------------------------------------------------------- the config
@pytest.mark.parametrize(
    "url, why",
    [
        ("ftp://am:9093", "http:// or https://"),
        ("am:9093", "http:// or https://"),
        ("http://user:secret@am:9093", "without credentials"),
        ("http://am:99999", "valid port"),
        ("http://am:9093/?x=1", "without a query"),
    ],
)
def test_a_bad_alertmanager_url_is_an_error_naming_its_key(url, why):
    with pytest.raises(ConfigError) as e:
        parse_config({"alerts": {"alertmanager": {"urls": [A, url]}}})
    assert "alerts.alertmanager.urls[1]" in str(e.value) and why in str(e.value)


def test_at_most_eight_alertmanagers():
    with pytest.raises(ConfigError, match="alerts.alertmanager.urls: at most 8"):
        parse_config({"alerts": {"alertmanager": {"urls": [f"http://am{i}:9093" for i in range(9)]}}})


def test_no_url_means_no_direct_push(tmp_path):
    assert AlertmanagerSink.from_config(parse_config({}).alerts, tmp_path) is None


# ---------------------------------------------------------------- what the status says
def test_the_status_text_names_an_alertmanager_that_takes_no_alerts(tmp_path):
    from vllm_guardian.surface.status_render import render_status
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

    world = Instances(A, B)
    world.answer[B] = Outcome("retry", "HTTP 503: down")
    s = sink(tmp_path, world, A, B)
    s.publish(opened())
    for inst in s.instances:
        inst.flush_once()
    doc = {"node": "gpu-1", "alertmanager": json.loads(json.dumps(dataclasses.asdict(s.status_section())))}
    text = render_status(StatusSnapshot.from_dict(doc))
    assert f"{B}: 1 spooled, HTTP 503: down" in text and f"{A}:" not in text

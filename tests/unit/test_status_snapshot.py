"""The typed status snapshot and its JSON document: the CLI's one ``from_dict`` reads back exactly
what the control socket's ``to_dict`` wrote (any snapshot, through JSON), the document keeps the
keys its readers use, a section not wired is left out, and a malformed document is refused with
the path of the wrong key."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_guardian.config.status import ConfigStatus, ReloadOutcome
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.status import GatesSummary, TrustStatus
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerStatus, InstanceStatus
from vllm_guardian.sinks.redis_sink import AlertsStatus
from vllm_guardian.surface.http_stats import HttpStatus
from vllm_guardian.surface.connection_slots import ConnectionCounts
from vllm_guardian.surface.kube_status import KubernetesStatus
from vllm_guardian.surface.web_security import WebConfigStatus
from vllm_guardian.surface.status_codec import StatusDocumentError
from vllm_guardian.surface.status_snapshot import OPTIONAL_SECTIONS, StatusSnapshot

FINITE = st.floats(allow_nan=False, allow_infinity=False)  # a NaN is unequal to itself; JSON has neither
TEXT = st.text(max_size=6)
INCIDENTS = st.builds(
    Incident,
    id=TEXT,
    kind=st.sampled_from(list(Kind)),
    severity=st.sampled_from(list(Severity)),
    node=TEXT,
    target=st.builds(TargetRef, name=TEXT, pid=st.integers(0, 2**22), starttime=st.integers(0, 2**40)),
    status=st.sampled_from(list(Status)),
    summary=TEXT,
    opened_at=FINITE,
)
FAILURES = st.builds(
    GateFailure,
    level=TEXT,
    check=TEXT,
    prompt=TEXT,
    output=TEXT,
    expected=TEXT,
    figures=st.dictionaries(TEXT, st.one_of(FINITE, TEXT, st.none()), max_size=2),
    source=TEXT,
)
st.register_type_strategy(Incident, INCIDENTS)
st.register_type_strategy(GateFailure, FAILURES)
st.register_type_strategy(float, FINITE)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.from_type(StatusSnapshot))
def test_any_snapshot_reads_back_equal_from_its_json_document(snapshot):
    doc = json.loads(json.dumps(snapshot.to_dict()))
    assert StatusSnapshot.from_dict(doc) == snapshot


def empty() -> StatusSnapshot:
    return StatusSnapshot.from_dict({"node": "n1", "version": "1"})


ALERTS = AlertsStatus(2, 5, 0, 1, 0, None, True, None, "redis://r:6379/0")
SECTIONS: dict[str, Any] = {
    "gates": GatesSummary({"accepted": 1}, {"malformed": 0}, ("ghost",), "signed", None),
    "device_faults": {},
    "alerts": ALERTS,
    "alertmanager": AlertmanagerStatus((InstanceStatus("http://am:9093", 1, 2, 0, 0, 3, False, "HTTP 503"),), 1),
    "config": ConfigStatus(1, ReloadOutcome(1.0, True, "config unchanged")),
    "api_keys": {"llama": "env VLLM_API_KEY"},
    "kubernetes": KubernetesStatus({"TaintWant": 1}, 0, False),
    "http": HttpStatus(
        "127.0.0.1:9464",
        "https",
        {"full": 0, "evicted": 1, "tls_handshake": 2},
        {"no_credentials": 1},
        WebConfigStatus("/etc/guardian/web.yml", "TLS", 1.0, 1, 1, False, "tls_server_config.cert_file: no such file"),
    ),
    "trust": TrustStatus("file /etc/guardian/trust.keys", ("gw-2026",), None, {"accepted": 1, "unsigned": 2}),
    "listeners": {"socket": ConnectionCounts(refused=0, evicted=15, timed_out=16), "http": ConnectionCounts()},
}


@pytest.mark.parametrize("section", sorted(OPTIONAL_SECTIONS))
def test_a_node_section_is_in_the_document_only_when_its_part_is_wired(section):
    assert section not in empty().to_dict()
    wired = dataclasses.replace(empty(), **{section: SECTIONS[section]})
    assert section in wired.to_dict()
    assert StatusSnapshot.from_dict(wired.to_dict()) == wired


def test_the_document_keeps_the_keys_its_readers_use():
    doc = dataclasses.replace(empty(), **SECTIONS).to_dict()
    assert set(doc) == {
        "schema",
        "node",
        "version",
        "time",
        "uptime_s",
        "guardian",
        "probes",
        "targets",
        "unmatched",
        "incidents",
        "actions",
        "maintenance_until",
        "accelerators",
        "accelerators_refused",
        "errors",
        "capabilities",
        "server_files",
        "groups",
        "orphans",
        *OPTIONAL_SECTIONS,
    }
    assert set(doc["actions"]) == {"outcomes", "restarts"}
    assert doc["alerts"]["dropped_total"] == 1 and doc["config"]["last_reload"]["ok"] is True
    assert (
        doc["http"]["connections_refused"]["tls_handshake"] == 2 and doc["http"]["web_config"]["reload_failures"] == 1
    )


def test_an_unmatched_target_is_an_object_naming_the_target_and_why():
    s = StatusSnapshot.from_dict({"unmatched": [{"target": "llama", "reason": "no process matches"}]})
    assert (s.unmatched[0].target, s.unmatched[0].reason) == ("llama", "no process matches")


def test_a_document_without_a_section_reads_as_empty():
    s = StatusSnapshot.from_dict({"node": "n1", "targets": [{"name": "llama"}]})
    assert (s.node, s.alerts, s.actions.outcomes, s.targets[0].processes, s.targets[0].serving) == (
        "n1",
        None,
        {},
        (),
        False,
    )


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"targets": {"llama": {}}}, "status.targets: expected a list"),
        ({"guardian": {"ticks": 1.5}}, "status.guardian.ticks: expected int"),
        ({"targets": [{"serving": "yes"}]}, "status.targets[0].serving: expected bool"),
        ({"alerts": {"spooled": "many"}}, "status.alerts"),
        ({"incidents": [{"id": "x"}]}, "status.incidents[0]: not an incident"),
    ],
)
def test_a_malformed_document_is_refused_with_the_path_of_the_wrong_key(doc, where):
    with pytest.raises(StatusDocumentError, match="^" + re.escape(where)):
        StatusSnapshot.from_dict(doc)

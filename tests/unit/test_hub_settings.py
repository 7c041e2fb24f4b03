"""The hubs (the responder, the alert sink) take their settings as one frozen object and their
ports by name: no long positional list to get out of order."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.kinds import KINDS
from vllm_guardian.loop.responder import Responder, ResponderPorts, ResponderSettings
from vllm_guardian.sinks.redis_sink import AlertSink, AlertSinkSettings


@pytest.mark.parametrize("hub", [Responder, AlertSink], ids=lambda c: c.__name__)
def test_every_parameter_of_a_hub_is_keyword_only(hub):
    params = list(inspect.signature(hub.__init__).parameters.values())[1:]  # past self
    assert params and [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY] == []


@pytest.mark.parametrize("settings", [ResponderSettings, ResponderPorts, AlertSinkSettings], ids=lambda c: c.__name__)
def test_settings_and_ports_are_frozen_dataclasses(settings):
    assert dataclasses.is_dataclass(settings)
    assert getattr(settings, "__dataclass_params__").frozen  # noqa: B009 - a dataclass's private record


def test_responder_settings_default_to_the_kind_table_and_no_target_configs():
    s = ResponderSettings(DetectorsConfig())
    assert s.kinds == KINDS and dict(s.target_configs) == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.detectors = DetectorsConfig()  # type: ignore[misc]


def test_alert_sink_settings_keep_the_config_defaults():
    s = AlertSinkSettings(node="n1")
    assert (s.stream, s.channel, s.control_channel, s.maxlen, s.heartbeat_ttl) == (
        "guardian:alerts",
        "guardian:alerts",
        "guardian:control",
        100_000,
        30.0,
    )

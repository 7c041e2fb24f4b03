"""The bounds of a config number are declared on its field (``setting(..., bound=...)``), not
guessed from its name: every duration and pace of the schema declares one, and the parser refuses
a value outside it with the field's words."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema import Config
from vllm_guardian.config.schema_fields import INTERVAL, SECONDS, TICK, Limit, setting
from vllm_guardian.errors import ConfigError


def float_fields(cls: typing.Any, path: str = "", seen: set | None = None) -> list[tuple[str, dataclasses.Field]]:
    """(key path, field) of every float of the config, through sections and lists of sections."""
    seen = set() if seen is None else seen
    if cls in seen:
        return []
    seen.add(cls)
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        where = f"{path}.{f.name}" if path else f.name
        tp = hints[f.name]
        inner = [tp, *typing.get_args(tp)]
        for t in inner:
            if dataclasses.is_dataclass(t):
                out += float_fields(t, where, seen)
        if tp is float or tp == (float | None):
            out.append((where, f))
    return out


FLOATS = float_fields(Config)


def test_the_walk_sees_the_floats_of_nested_sections_and_lists():
    names = {p for p, _ in FLOATS}
    assert {"interval", "detectors.busy_loop.window", "targets.restart.stop_timeout", "alerts.heartbeat_ttl"} <= names


def test_a_limit_is_broken_only_outside_its_range():
    at_most_2 = Limit("at most 2", high=2.0)
    assert [at_most_2.broken_by(v) for v in (1.0, 2.0, 2.5)] == [False, False, True]
    assert [Limit("at least 1", low=1.0).broken_by(v) for v in (0.5, 1.0)] == [True, False]


def test_setting_keeps_the_bound_in_the_field_metadata():
    assert setting(1.0, "positive", bound=SECONDS).metadata["bound"] == SECONDS
    assert "bound" not in setting(1.0, "positive").metadata


@pytest.mark.parametrize("path, f", [(p, f) for p, f in FLOATS if f.metadata.get("bound")], ids=lambda x: str(x))
def test_every_declared_bound_is_a_tuple_of_limits(path, f):
    assert all(isinstance(limit, Limit) for limit in f.metadata["bound"])


def test_every_interval_declares_the_pace_bound_and_every_timeout_and_ttl_a_duration_bound():
    """What the name guess used to cover is now declared: a new field of the same kind must say its bound."""
    missing = []
    for path, f in FLOATS:
        name = path.rpartition(".")[2]
        bound = f.metadata.get("bound", ())
        if path == "interval":
            ok = bound == TICK
        elif name == "interval" or name.endswith("_interval"):
            ok = bound == INTERVAL
        elif name.endswith(("timeout", "_ttl")) or name == "window":
            ok = set(SECONDS) <= set(bound)
        else:
            continue
        if not ok:
            missing.append(path)
    assert missing == []


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"interval": 0.01}, "interval: expected between 0.05 and 3600 seconds, got 0.01"),
        (
            {"probes": {"procfs": {"interval": 0.01}}},
            "probes.procfs.interval: expected at least 0.05 seconds, got 0.01",
        ),
        ({"alerts": {"heartbeat_ttl": 1e7}}, "alerts.heartbeat_ttl: expected at most 2.592e+06 seconds (30 days), got"),
        (
            {"probes": {"vllm_http": {"max_engines": 2000}}},
            "probes.vllm_http.max_engines: expected at most 1024 (each engine is judged every tick), got 2000",
        ),
    ],
    ids=["the tick", "a probe's pace", "a duration", "an int's declared bound"],
)
def test_a_value_outside_its_declared_bound_is_refused_with_the_fields_words(data, expected):
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert any(p.startswith(expected) for p in e.value.problems), e.value.problems

"""A port carries a call from a part built early to one built after it: bound once, by the assembler,
before anything calls it."""

from __future__ import annotations

import pytest

from vllm_guardian.loop.ports import Port
from vllm_guardian.model import Kind


def test_a_bound_port_forwards_the_call_and_its_result():
    port: Port[[int, int], int] = Port("add")
    port.bind(lambda a, b: a + b)
    assert port(2, 3) == 5 and port.bound


def test_a_port_called_before_it_is_bound_says_which_port():
    port: Port[[], None] = Port("incident_opened")
    with pytest.raises(RuntimeError, match="port incident_opened called before it was bound"):
        port()


def test_a_port_is_bound_only_once():
    port: Port[[], int] = Port("record_action")
    port.bind(lambda: 1)
    with pytest.raises(RuntimeError, match="already bound"):
        port.bind(lambda: 2)
    assert port() == 1


def test_a_declared_kind_is_one_object_found_by_its_name_like_a_built_in_one():
    k = Kind.declare("test_ports_kind")
    assert Kind.declare("test_ports_kind") is k and Kind("test_ports_kind") is k
    assert k.value == "test_ports_kind" and k == "test_ports_kind" and isinstance(k, Kind)
    assert Kind.declare("busy_loop") is Kind.BUSY_LOOP


def test_a_kind_is_a_lowercase_name():
    with pytest.raises(ValueError):
        Kind.declare("Not A Kind")

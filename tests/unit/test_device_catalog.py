"""The device-fault catalog: shipped entries load, name a source, and say whether a restart helps;
a bad file lists every problem at once."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.catalog_load import CatalogError
from vllm_guardian.detectors.device_catalog import ACTIONS, SEVERITIES, load_text, shipped


def test_the_shipped_catalog_loads_and_every_entry_names_its_source():
    cat = shipped()
    assert len(cat.entries) >= 30
    for e in cat.entries.values():
        assert e.source.strip() and e.meaning.strip() and e.what_to_do.strip()
        assert e.severity in SEVERITIES and e.action in ACTIONS


@pytest.mark.parametrize(
    "code, blocks, action",
    [
        ("xid:79", True, "reboot_node"),  # fallen off the bus
        ("xid:48", True, "reset_gpu"),  # double-bit ECC
        ("xid:64", True, "replace"),  # remapping failed
        ("xid:95", True, "reset_gpu"),  # uncontained ECC
        ("gpu_lost", True, "reboot_node"),
        ("remap_failure", True, "replace"),
        ("xid:94", False, "restart_app"),  # contained: restarting the hit app helps
        ("xid:13", False, "restart_app"),  # usually the application
        ("remap_pending", False, "reset_gpu"),  # a warning: annotate, never block
        ("throttle:hw_thermal", False, "watch"),
        ("npu_health:Alarm", True, "drain_node"),
        ("npu_health:Warning", False, "watch"),
    ],
)
def test_what_blocks_a_restart_is_a_critical_fault_a_restart_cannot_help(code, blocks, action):
    e = shipped().lookup(code)
    assert (e.code, e.blocks_restart, e.action) == (code, blocks, action)


def test_an_unknown_code_falls_back_to_its_family_and_never_blocks():
    cat = shipped()
    assert cat.lookup("xid:4242").code == "xid:*" and not cat.lookup("xid:4242").blocks_restart
    assert cat.lookup("npu_error:80E01801").code == "npu_error:*"
    assert cat.lookup("something_new").code == "*" and not cat.lookup("something_new").blocks_restart


def test_a_bad_catalog_lists_every_problem_at_once():
    text = """
schema: 1
name: t
version: "1"
faults:
  - {code: "xid:1", title: t, meaning: m, severity: fatal, restart_can_help: false, action: watch, TAIL}
  - {code: "xid:2", title: t, meaning: m, severity: info, restart_can_help: "no", action: pray, TAIL}
  - {code: "xid:3", title: t, severity: info, restart_can_help: true, action: watch, TAIL, extra: 1}
  - {code: "xid:4", title: t, meaning: m, severity: info, restart_can_help: true, action: watch, TAIL}
  - {code: "xid:4", title: t, meaning: m, severity: info, restart_can_help: true, action: watch, TAIL}
"""
    with pytest.raises(CatalogError) as err:
        load_text(text.replace("TAIL", "what_to_do: w, source: s"), "t.yaml")
    lines = str(err.value).splitlines()
    assert any("faults[0]: severity must be one of" in line for line in lines)
    assert any("faults[1]: restart_can_help must be true or false" in line for line in lines)
    assert any("faults[1]: action must be one of" in line for line in lines)
    assert any("faults[2]: unknown field(s) extra" in line for line in lines)
    assert any("faults[2]: missing field(s) meaning" in line for line in lines)
    assert any("faults[4]: duplicate code 'xid:4'" in line for line in lines)


@pytest.mark.parametrize("text", ["", "[]", "schema: 2\nfaults: []", "faults: {a: 1}", ": : :"])
def test_a_catalog_that_is_not_one_is_a_clear_error(text):
    with pytest.raises(CatalogError):
        load_text(text, "t.yaml")

"""``npu-smi info -t health``: every format seen, and what an unhealthy chip becomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.host.accel import DeviceCondition
from vllm_guardian.host.accel.npu_smi import chip_conditions
from vllm_guardian.host.accel.npu_smi_health import NpuHealth, parse_health
from vllm_guardian.host.accel.npu_smi_parse import parse_info

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"


@pytest.mark.parametrize(
    "fixture, expected",
    [
        ("health-device-ok.txt", NpuHealth(0, None, "OK", (), "")),
        ("health-chip-ok.txt", NpuHealth(None, None, "OK", (), "")),
        (
            "health-chip-warning-code.txt",
            NpuHealth(None, None, "Warning", ("80E01801",), "node type=SOC, sensor type=Temperature"),
        ),
    ],
)
def test_each_health_format_seen_is_read(fixture, expected):
    assert parse_health((FIX / fixture).read_text()) == [expected]


def test_several_codes_and_chip_sections_are_kept_apart():
    text = (
        "        NPU ID : 3\n        Chip ID : 0\n        Health Status : alarm\n"
        "        Error Code : 80E01801, 80CB8009\n        Error Information : hot\n"
        "        Chip ID : 1\n        Health Status : OK\n        Error Code : NA\n"
    )
    assert parse_health(text) == [
        NpuHealth(3, 0, "Alarm", ("80E01801", "80CB8009"), "hot"),
        NpuHealth(3, 1, "OK", (), ""),
    ]


@pytest.mark.parametrize("text", ["", "dcmi module initialize failed. ret is -8005\n", "Error Code : 1\n"])
def test_output_without_a_health_line_is_an_error(text):
    with pytest.raises(ValueError):
        parse_health(text)


def test_an_alarmed_chip_gets_its_status_and_its_cards_codes_a_healthy_one_nothing():
    info = parse_info((FIX / "310b4-no-hbm-alarm.txt").read_text())
    (chip,) = info.chips
    assert chip.health == "Alarm"
    health = NpuHealth(0, None, "Alarm", ("80E01801",), "node type=SOC")
    assert chip_conditions(chip, health) == (
        DeviceCondition("npu_health:Alarm", "node type=SOC"),
        DeviceCondition("npu_error:80E01801", "node type=SOC"),
    )
    assert chip_conditions(chip, None) == (DeviceCondition("npu_health:Alarm", "npu-smi health Alarm"),)
    ok = parse_info((FIX / "a3-ascend910-two-chips.txt").read_text()).chips[0]
    assert chip_conditions(ok, health) == ()

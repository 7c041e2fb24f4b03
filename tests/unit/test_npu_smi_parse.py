"""npu-smi parsers: every known layout of ``npu-smi info`` parses to the same shape;
anything else is "unrecognised npu-smi output" (layouts: tests/fixtures/npu_smi/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.accel.npu_smi_parse import NpuChip, NpuProcess, NpuSmiInfo, parse_info, parse_usages
from vllm_guardian.testing.fake_npu_smi import render_info

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def info(name: str) -> NpuSmiInfo:
    return parse_info(fixture(name))


# ------------------------------------------------------------------ every variant, one shape
# file -> (version, chip keys (npu, chip), process count, idle NPUs)
VARIANTS = {
    "a3-ascend910-two-chips.txt": ("25.2.0", [(0, 0), (0, 1), (1, 0), (1, 1)], 1, (0,)),
    "a2-910b2c-trailing-spaces.txt": ("23.0.2.1", [(0, 0), (1, 0)], 1, ()),
    "training-910a-24.1rc2-warning.txt": ("24.1.RC2", [(n, 0) for n in range(8)], 32, ()),
    "310b4-no-hbm-alarm.txt": ("23.0.0", [(0, 0)], 0, ()),
    "310p3-na-power-lost-space.txt": ("24.1.0.1", [(1, 0), (1, 1), (2, 0), (2, 1)], 4, ()),
    "310-driver-21.0.3.1-no-hugepages.txt": ("21.0.3.1", [(n, c) for n in (1, 3) for c in range(4)], 0, ()),
    "910a-driver-21.0.3.2-no-hugepages.txt": ("21.0.3.2", [(1, 0), (4, 0)], 0, ()),
    "310-inference-3000-21.0.4-doc-trailer.txt": ("21.0.4.B030", [(6, c) for c in range(4)], 0, ()),
    "ascend950-npu-id.txt": ("25.7.rc1.6", [(0, 0), (1, 0)], 2, (0,)),
}


def test_every_info_fixture_is_covered_by_the_table():
    files = {p.name for p in FIXTURES.glob("*.txt") if not p.name.startswith(("usages", "common", "health"))}
    assert files == set(VARIANTS)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_layout_parses_to_the_same_structured_shape(name):
    version, keys, nprocs, idle = VARIANTS[name]
    r = info(name)
    assert isinstance(r, NpuSmiInfo)
    assert all(isinstance(c, NpuChip) for c in r.chips) and all(isinstance(p, NpuProcess) for p in r.processes)
    assert (r.version, [(c.npu, c.chip) for c in r.chips], len(r.processes), r.idle_npus) == (
        version,
        keys,
        nprocs,
        idle,
    )
    for c in r.chips:  # the numbers every consumer relies on are there in every layout
        assert c.health and c.name and c.temp_c is not None and c.aicore_pct is not None
        assert c.memory_total_mb is not None or c.hbm_total_mb is not None


# ------------------------------------------------------------------ what each variant teaches
def test_a3_second_chip_has_phy_id_and_no_power():
    c = info("a3-ascend910-two-chips.txt").chips[1]
    assert (c.npu, c.chip, c.phy_id, c.power_w, c.temp_c, c.bus_id) == (0, 1, 1, None, 37.0, "0000:9E:00.0")


@pytest.mark.parametrize(
    "name, index, used, total",
    [
        ("a3-ascend910-two-chips.txt", 3, 10568, 65536),
        ("a2-910b2c-trailing-spaces.txt", 0, 20701, 65536),
    ],
)
def test_used_slash_total_without_the_space_still_parses(name, index, used, total):
    c = info(name).chips[index]
    assert (c.hbm_used_mb, c.hbm_total_mb) == (used, total)


def test_310p_lost_space_in_the_ddr_column():
    c = info("310p3-na-power-lost-space.txt").chips[0]
    assert (c.memory_used_mb, c.memory_total_mb, c.power_w, c.hbm_used_mb) == (16302, 44280, None, None)


@pytest.mark.parametrize(
    "name, npu, health",
    [
        ("training-910a-24.1rc2-warning.txt", 3, "Warning"),
        ("training-910a-24.1rc2-warning.txt", 0, "OK"),
        ("310b4-no-hbm-alarm.txt", 0, "Alarm"),
    ],
)
def test_health_is_kept_as_printed(name, npu, health):
    assert next(c for c in info(name).chips if c.npu == npu).health == health


def test_no_hbm_column_leaves_hbm_absent_and_reads_the_device_column():
    c = info("310b4-no-hbm-alarm.txt").chips[0]
    assert (c.hbm_used_mb, c.hbm_total_mb, c.memory_used_mb, c.memory_total_mb) == (None, None, 3628, 15609)
    assert (c.bus_id, c.phy_id, c.hugepages_used, c.hugepages_total) == (None, 0, 15, 15)


@pytest.mark.parametrize("name", ["310-driver-21.0.3.1-no-hugepages.txt", "910a-driver-21.0.3.2-no-hugepages.txt"])
def test_drivers_without_the_hugepages_column(name):
    c = info(name).chips[0]
    assert (c.hugepages_used, c.hugepages_total) == (None, None)
    assert c.power_w is not None and c.temp_c is not None


def test_910a_without_hugepages_keeps_its_hbm_column():
    c = info("910a-driver-21.0.3.2-no-hugepages.txt").chips[1]
    assert (c.npu, c.memory_used_mb, c.memory_total_mb, c.hbm_used_mb, c.hbm_total_mb) == (4, 1809, 15082, 0, 32768)


def test_310_device_column_is_the_phy_id():
    chips = info("310-inference-3000-21.0.4-doc-trailer.txt").chips
    assert [(c.chip, c.phy_id) for c in chips] == [(0, 3), (1, 4), (2, 5), (3, 6)]
    assert chips[0].hugepages_total == 970


def test_ascend950_reads_npu_util_and_the_npu_id_process_table():
    r = info("ascend950-npu-id.txt")
    assert [(c.name, c.aicore_pct, c.hbm_used_mb, c.hbm_total_mb) for c in r.chips] == [
        ("Ascend950PR", 0.0, 5239, 131072),
        ("Ascend950PR", 37.0, 98304, 131072),
    ]
    assert r.processes == (NpuProcess(1, None, 2018733, "VLLMWorker_TP", 30212), NpuProcess(1, None, 2018801, "", 512))


def test_process_rows_with_npu_and_chip():
    r = info("a3-ascend910-two-chips.txt")
    assert r.processes == (NpuProcess(1, 1, 990711, "python", 7746),)


def test_process_names_cut_to_15_characters_are_kept_as_printed():
    names = {p.name for p in info("training-910a-24.1rc2-warning.txt").processes}
    assert names == {"hlt_host_devmm_"}
    assert {p.name for p in info("310p3-na-power-lost-space.txt").processes} == {"mindie_llm_back"}


def test_trailing_spaces_change_nothing():
    text = fixture("a3-ascend910-two-chips.txt")
    padded = "".join(line + "   \n" for line in text.splitlines())
    assert parse_info(padded) == parse_info(text)


def test_text_after_the_table_is_ignored():
    assert info("training-910a-24.1rc2-warning.txt").chips[-1].npu == 7


def test_a_column_of_unknown_meaning_is_kept_in_extra():
    text = (
        fixture("910a-driver-21.0.3.2-no-hugepages.txt")
        .replace("AICore(%)  Memory-Usage(MB)  HBM-Usage(MB)  |", "AICore(%)  Memory-Usage(MB)  HBM-Usage(MB)  Foo(x)|")
        .replace("0    / 32768   |", "0    / 32768  7|")
    )
    c = parse_info(text).chips[0]
    assert (c.extra, c.hbm_total_mb) == ({"Foo(x)": "7"}, 32768)


# ------------------------------------------------------------------ fail soft on anything else
A2 = fixture("a2-910b2c-trailing-spaces.txt")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "dcmi module initialize failed. ret is -8005\n",
        "<html><body>502 Bad Gateway</body></html>\n",
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n",
        A2.replace("| 0                         | 0000:5A:00.0  |", "| x                         | 0000:5A:00.0  |"),
        A2.replace("88.6        51", "88.6        51    12"),
        A2.replace("| 124528        |", "| pid?          |"),
        A2.replace(
            "| 0     910B2C              | OK            | 88.6", "| 0     910B2C              | OK | 88.6 | extra"
        ),
        "\n".join(A2.splitlines()[:7]) + "\n",
        "| some other table | with | pipes |\n",
        A2.replace("88.6        51", "nan         51"),
        A2.replace("88.6        51", "inf         51"),
    ],
    ids=[
        "empty",
        "dcmi error",
        "html",
        "header only",
        "chip not a number",
        "extra value",
        "pid not a number",
        "extra cell",
        "half a device block",
        "unknown table",
        "not a number: nan",
        "not a finite number: inf",
    ],
)
def test_anything_else_is_unrecognised(text):
    with pytest.raises(ProbeFailed, match="^unrecognised npu-smi output: "):
        parse_info(text)


# ------------------------------------------------------------------ a process name is another user's text
ENGINE = 4242  # the server's engine holds 20000 MB on NPU 0; the other process is anyone's


def table_with_a_process_named(name: str, layout: str = "a2") -> str:
    """The fake npu-smi's table (names cut to 15 characters, as npu-smi prints them)."""
    return render_info(
        {
            "layout": layout,
            "devices": [{"npu": 0, "chip": 0}, {"npu": 1, "chip": 0}],
            "processes": [
                {"npu": 0, "chip": 0, "pid": ENGINE, "name": "VLLM::EngineCor", "memory_mb": 20000},
                {"npu": 0, "chip": 0, "pid": 9999, "name": name, "memory_mb": 7000},
            ],
        },
        0.0,
    )


HOSTILE_NAMES = {
    "a | in the name shifts the cells": "vllm|worker",
    "a line break forges a row for the engine": "\n|0 0|4242|x",
    "a carriage return forges a row for the engine": "\r|0 0|4242|x",
    "a line break and a | on the next line": "a\n|b|c",
    "a | closing the cut line forges a row for the engine": "a|\n|0 0|4242|x",
    "a line break alone": "worker\n",
}


@pytest.mark.parametrize("layout", ["a2", "950"])
@pytest.mark.parametrize("name", sorted(HOSTILE_NAMES))
def test_a_process_name_that_breaks_the_table_is_refused_and_forges_nothing(name, layout):
    got = parse_info(table_with_a_process_named(HOSTILE_NAMES[name], layout))
    assert [(p.pid, p.memory_mb) for p in got.processes] == [(ENGINE, 20000)]
    assert got.refused_rows >= 1 and got.refused_examples
    assert [c.npu for c in got.chips] == [0, 1] and got.idle_npus == (1,)


def test_a_plain_name_is_no_refusal():
    got = parse_info(table_with_a_process_named("python3"))
    assert [p.pid for p in got.processes] == [ENGINE, 9999] and got.refused_rows == 0


# ------------------------------------------------------------------ -t usages / -t common
def test_usages_with_chip_id_printed_last():
    (u,) = parse_usages(fixture("usages-910-one-chip.txt"))
    assert (u.npu, u.chip, u.hbm_capacity_mb, u.hbm_usage_pct, u.aicore_pct) == (0, 0, 32768.0, 0.0, 0.0)
    assert u.get("DDR Capacity(MB)") == 13553.0


def test_common_with_chip_id_printed_first():
    (u,) = parse_usages(fixture("common-910-one-chip.txt"))
    assert (u.npu, u.chip, u.get("Temperature(C)"), u.get("NPU Real-time Power(W)")) == (0, 0, 41.0, 71.7)


def test_two_chips_and_a_management_chip_section():
    text = """
        NPU ID                         : 3
        Chip Count                     : 2
        HBM Capacity(MB)               : 65536
        HBM Usage Rate(%)              : 40
        Aicore Usage Rate(%)           : 12
        Chip ID                        : 0
        HBM Capacity(MB)               : 65536
        HBM Usage Rate(%)              : 10
        Aicore Usage Rate(%)           : NA
        Chip ID                        : 1
        Chip Name                      : mcu
        Temperature(C)                 : 50
        NPU Real-time Power(W)         : 300.5
"""
    got = [(u.npu, u.chip, u.hbm_usage_pct, u.aicore_pct) for u in parse_usages(text)]
    assert got == [(3, 0, 40.0, 12.0), (3, 1, 10.0, None)]


def test_npu_utilization_stands_in_for_aicore_on_ascend950():
    (u,) = parse_usages("NPU ID : 0\nChip ID : 0\nNPU Utilization(%) : 55\n")
    assert u.aicore_pct == 55.0


@pytest.mark.parametrize(
    "text",
    ["", "Error parameter of -t\n", "Chip ID : 0\nHBM Usage Rate(%) : 3\n", "NPU ID : 0\nChip Count : 1\n"],
    ids=["empty", "error", "no npu id", "no values"],
)
def test_usages_without_an_npu_id_or_values_are_unrecognised(text):
    with pytest.raises(ProbeFailed, match="^unrecognised npu-smi output: "):
        parse_usages(text)

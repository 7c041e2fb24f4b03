"""Every config shipped under configs/ loads; the commented default is the defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vllm_guardian.config.loader import load_config
from vllm_guardian.config.schema import Config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SHIPPED = sorted(CONFIGS.rglob("*.yaml"))


def test_configs_are_shipped():
    assert SHIPPED, f"no *.yaml under {CONFIGS}"
    assert CONFIGS / "guardian.yaml" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(CONFIGS)) for p in SHIPPED])
def test_shipped_config_loads_without_errors(path):
    assert isinstance(load_config(str(path), hostname=lambda: "node-a"), Config)


def test_the_commented_default_config_is_exactly_the_defaults():
    cfg = load_config(str(CONFIGS / "guardian.yaml"), hostname=lambda: "node-a")
    assert dataclasses.replace(cfg, node=None) == Config()


@pytest.mark.parametrize(
    "name, expect",
    [
        (
            "nvidia.yaml",
            lambda c: (
                c.targets[0].match.port == 8000
                and c.targets[0].restart.mode == "command"
                and c.accelerators.nvml == "auto"
            ),
        ),
        (
            "ascend.yaml",
            lambda c: (
                c.accelerators.npu_smi == "auto"
                and c.accelerators.npu_smi_path.endswith("npu-smi")
                and c.accelerators.nvml == "off"
            ),
        ),
        (
            "systemd.yaml",
            lambda c: c.targets[0].match.systemd_unit is not None and c.targets[0].restart.mode == "systemd",
        ),
        (
            "kubernetes.yaml",
            lambda c: (
                c.autodiscover
                and c.targets[0].match.kubernetes.pod is not None
                and c.targets[0].api_url is None  # the pod IP and its container port
                and c.targets[0].restart.mode == "kubernetes"
            ),
        ),
        (
            "kubernetes-observe-only.yaml",
            lambda c: (
                c.policy.dry_run and c.targets[0].match.kubernetes is not None and c.targets[0].restart.mode == "signal"
            ),
        ),
        (
            "dry-run.yaml",
            lambda c: (
                c.policy.dry_run
                and all(
                    getattr(c.detectors, f.name).mode in ("observe", "alert") for f in dataclasses.fields(c.detectors)
                )
            ),
        ),
        (
            "command-restart.yaml",
            lambda c: (
                c.targets[0].match.port is not None
                and c.targets[0].restart.mode == "command"
                and len(c.targets[0].restart.command) > 0
            ),
        ),
    ],
)
def test_example_config_shows_what_its_name_says(name, expect):
    assert expect(load_config(str(CONFIGS / "examples" / name), hostname=lambda: "node-a"))


def _field_paths(cls: type, prefix: str = "") -> list[str]:
    """Every key of the schema as a dotted path (nested sections, the target list's entries included)."""
    import typing

    out: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        out.append(path)
        t = hints[f.name]
        inner = [a for a in typing.get_args(t) if dataclasses.is_dataclass(a)] or (
            [t] if dataclasses.is_dataclass(t) else []
        )
        for sub in inner:
            out.extend(_field_paths(typing.cast(type, sub), path + "."))
    return out


def test_the_commented_default_config_names_every_key_of_the_schema():
    """configs/guardian.yaml says it holds every key: each key's name appears there as `name:`
    (as YAML or, for the target list, as a comment); a new key without a line there fails."""
    import re

    text = (CONFIGS / "guardian.yaml").read_text()
    missing = [p for p in _field_paths(Config) if not re.search(rf"\b{re.escape(p.rsplit('.', 1)[-1])}:", text)]
    assert missing == []

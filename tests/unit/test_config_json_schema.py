"""The config's JSON Schema (vllm_guardian/config/json_schema.py) says what the parser says: every
shipped config passes both, and a config the schema refuses the parser refuses at the same key."""

from __future__ import annotations

from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from vllm_guardian.config.json_schema import config_schema
from vllm_guardian.config.loader import parse_config
from vllm_guardian.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs").rglob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(config_schema())


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(config_schema())


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_passes_the_schema_and_the_parser(path):
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert not list(VALIDATOR.iter_errors(doc))
    parse_config(doc)


BAD = [
    ({"interval": "1s"}, "interval"),
    ({"alerts": {"redis_ulr": "redis://x"}}, "alerts.redis_ulr"),
    ({"policy": {"dry_run": "yes"}}, "policy.dry_run"),
    ({"targets": [{"name": "a", "api_key": "s3cret"}]}, "targets[0].api_key"),
    ({"targets": [{"match": {"port": 8000}}]}, "targets[0].name"),
    ({"api": {"http": 9464}}, "api.http"),
    ({"alerts": {"heartbeat_ttl": 0}}, "alerts.heartbeat_ttl"),
    ({"kubernetes": {"pod_removal": "kill"}}, "kubernetes.pod_removal"),
]


@pytest.mark.parametrize(("doc", "key"), BAD, ids=[k for _, k in BAD])
def test_a_config_the_schema_refuses_the_parser_refuses_at_the_same_key(doc, key):
    assert list(VALIDATOR.iter_errors(doc)), "the schema accepted it"
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    assert any(line.startswith(key) for line in e.value.problems), e.value.problems

"""The chart's generated files (tools/chart_docs.py): values.schema.json and README.md are what the
generator writes from values.yaml and the guardian's config schema; helm itself refuses a value the
schema refuses (a typo in a chart key or in a guardian config key fails at install, not in the pod)."""

from __future__ import annotations

import pytest
import yaml

from tools.chart_docs import CHART, documented_keys, generated, main
from tools.k8s_render import ToolFailed, helm_template


def test_the_committed_schema_and_readme_are_what_the_generator_writes():
    for path, text in generated().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name}: run python -m tools.chart_docs"
    assert main(["--check"]) == 0


def test_every_chart_value_outside_free_form_maps_has_a_readme_row():
    from tools.chart_docs import FREE_FORM

    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for key, _ in documented_keys((CHART / "values.yaml").read_text(encoding="utf-8")):
        node = values
        for part in key.split("."):
            node = node[part]
        leaf = not isinstance(node, dict) or not node
        if leaf and not any(part in FREE_FORM for part in key.split(".")[:-1]):
            assert f"| `{key}` |" in readme, key


@pytest.mark.parametrize(
    ("sets", "where"),
    [
        ({"mode": "fix-it"}, "mode"),
        ({"metricsPort": "70000"}, "metricsPort"),
        ({"image.digest": "latest"}, "digest"),
        ({"replicas": "3"}, "replicas"),  # not a key of this chart: a DaemonSet
        ({"config.interval": "soon"}, "interval"),  # the guardian's own schema, under config
        ({"config.alerts.redis_ulr": "redis://x"}, "redis_ulr"),  # a typo in a config key
        ({"config.targets[0].name": "a", "config.targets[0].api_key": "s3cret"}, "api_key"),  # never in config
    ],
    ids=["mode", "port", "digest", "unknown-chart-key", "config-type", "config-typo", "config-forbidden-key"],
)
def test_helm_refuses_a_value_the_schema_refuses(sets, where):
    with pytest.raises(ToolFailed, match="schema") as e:
        helm_template(sets=sets)
    assert where in str(e.value)


def test_the_chart_defaults_and_every_ci_value_set_pass_the_schema():
    for values in [None, *sorted((CHART / "ci").glob("*-values.yaml"))]:
        assert helm_template([values] if values else None)

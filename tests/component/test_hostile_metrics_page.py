"""A real HTTP server whose /metrics names engine labels never seen before on every page, scraped
by the assembled daemon through the real HTTP client: what it keeps stays bounded, what it drops
is counted by reason and said once, and the real engine is still read."""

from __future__ import annotations

import logging

import pytest

from tests.support.daemon_world import World
from tests.support.hostile_metrics import FloodServer
from vllm_guardian.host.http import StdlibHttpClient
from vllm_guardian.series import metrics as m

SCRAPES = 6


@pytest.mark.parametrize(
    "flood, probe_cfg, reason, read",
    [
        (20_000, {}, "too_many_samples", False),  # the audit's page: refused as the parser reaches its cap
        (500, {}, "engines", True),  # under the cap: read, the labels that are no rank dropped
        (2_000, {"max_page_bytes": 64 * 1024}, "page_too_large", False),  # refused unparsed
    ],
    ids=["20000-labels", "500-labels", "over-the-size-cap"],
)
def test_a_flood_of_engine_labels_is_bounded_counted_and_said_once(tmp_path, caplog, flood, probe_cfg, reason, read):
    with FloodServer(flood) as server:
        w = World(tmp_path, {"probes": {"vllm_http": probe_cfg}}, port=server.port, http=StdlibHttpClient())
        with caplog.at_level(logging.INFO):
            while server.pages < SCRAPES:
                w.step()
        name = w.target()["name"]
        every = w.d.series.keys()
        keys = [k for k in every if k.target == name]
        assert not [k for k in keys if k.subject.startswith("engine:")]  # no label of the flood got a series
        assert len(keys) < 200, len(keys)  # the tree's own series: ~20, never thousands
        dropped = w.target()["metrics_dropped"]
        per_page = flood if reason == "engines" else 1
        assert set(dropped) == {reason} and dropped[reason] >= (SCRAPES - 1) * per_page
        ok = w.d.series.latest(name, "", m.METRICS_OK)
        assert ok is not None and ok[1] == (1.0 if read else 0.0)
        if read:  # the real engine's counters are still read
            assert w.d.series.latest(name, "", m.ITERATIONS) is not None
        said = [r for r in caplog.records if r.levelno >= logging.WARNING and name in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]

"""Live: a real guardian pushes its incident to two real Alertmanagers (Debian's build, no
clustering between them): the alert arrives on both with its annotations, and resolves on both."""

from __future__ import annotations

import re
import subprocess
from functools import partial
from pathlib import Path

import pytest

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from vllm_guardian.testing.redis_server import RedisServer
from tests.fleet.alertmanager_procs import BINARY, Alertmanager, Webhook
from tests.support.guardian_process import GuardianProcess, config, sweep, trip
from tests.support.wait import poll

pytestmark = pytest.mark.live

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def pair(tmp_path, webhook):
    ams: list[Alertmanager] = []
    try:
        ams = [Alertmanager(tmp_path, webhook.url), Alertmanager(tmp_path, webhook.url)]
        yield ams
    finally:
        for am in ams:
            am.stop()


def busy_loop_alert(am: Alertmanager, *, with_evidence: bool = False) -> dict | None:
    """The open busy_loop alert; ``with_evidence``: once it names its evidence (captured after the
    incident opened, announced by the update that follows)."""
    alerts = [a for a in am.alerts() if a["labels"].get("kind") == "busy_loop"]
    return next((a for a in alerts if not with_evidence or "evidence" in a["annotations"]), None)


def resolved_busy_loops(webhook: Webhook, am: Alertmanager) -> list[dict]:
    """The resolved busy_loop alerts ``am`` notified the webhook of."""
    return [a for a in webhook.alerts(am.url) if a["status"] == "resolved" and a["labels"].get("kind") == "busy_loop"]


def test_an_incident_arrives_on_both_alertmanagers_and_resolves_on_both(tmp_path, pair, webhook):
    port = free_port("127.0.0.1")
    sim = SimServer(port=port, startup_delay=1.0).start()
    try:
        sim.wait_ready(60)
        with RedisServer() as redis:
            extra = config(port, tmp_path)
            extra.update(
                node="node-am",
                alerts={
                    "redis_url": redis.url,
                    "alertmanager": {"urls": [am.url for am in pair], "resend_interval": 30},
                },
            )
            g = GuardianProcess(tmp_path, port, extra=extra).start()
            try:
                assert g.wait_ready(30), g.log_text()
                trip(port, "busy_loop")
                firing = [poll(partial(busy_loop_alert, am, with_evidence=True), 90) for am in pair]
                for am, alert in zip(pair, firing, strict=True):
                    assert alert is not None, f"{am.url} never got the alert\n{g.log_text()}"
                    assert alert["labels"] | {"alertname": "VllmGuardianIncidentOpen"} == alert["labels"]
                    assert (alert["labels"]["node"], alert["labels"]["target"]) == ("node-am", "sim")
                    assert alert["labels"]["severity"] in ("critical", "warning")
                    notes = alert["annotations"]
                    assert notes["runbook_url"].endswith("/docs/runbooks/busy_loop.md")
                    assert notes["evidence"].startswith("node-am:" + str(g.state_dir))
                    assert notes["summary"] and notes["incident_id"]
                # the guardian restarts the server; the incident resolves: both are told, not left to expire
                for am in pair:
                    resolved = poll(partial(resolved_busy_loops, webhook, am), 150)
                    assert resolved, f"{am.url} never notified the resolution\n{g.log_text()}"
                    assert busy_loop_alert(am) is None
                status = g.status() or {}
                instances = status.get("alertmanager", {}).get("instances", [])
                assert [i["up"] for i in instances] == [True, True]
                assert all(i["sent_total"] >= 2 and i["spooled"] == 0 for i in instances)
            finally:
                g.stop()
    finally:
        sim.stop()
        sweep(port)


def test_an_alert_spooled_while_an_alertmanager_is_down_arrives_when_it_starts(tmp_path, webhook):
    """Still firing when the Alertmanager comes up (dry run: no restart ends the incident), so it
    notifies: one that arrives already resolved is recorded but, by design, never notified."""
    port, am_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    sim = SimServer(port=port, startup_delay=1.0).start()
    late: Alertmanager | None = None
    try:
        sim.wait_ready(60)
        with RedisServer() as redis:
            extra = config(port, tmp_path)
            url = f"http://127.0.0.1:{am_port}"
            extra.update(node="node-late", alerts={"redis_url": redis.url, "alertmanager": {"urls": [url]}})
            g = GuardianProcess(tmp_path, port, extra=extra).start("--dry-run")  # the incident stays open
            try:
                assert g.wait_ready(30), g.log_text()
                trip(port, "busy_loop")

                def instance() -> dict:
                    return ((g.status() or {}).get("alertmanager") or {"instances": [{}]})["instances"][0]

                assert poll(lambda: instance().get("spooled", 0) >= 1 and instance()["up"] is False, 90), g.log_text()
                late = Alertmanager(tmp_path, webhook.url, port=am_port)
                heard = poll(
                    lambda: [a for a in webhook.alerts(late.url) if a["labels"].get("kind") == "busy_loop"], 90
                )
                assert heard, g.log_text()
                assert heard[0]["annotations"]["runbook_url"].endswith("/docs/runbooks/busy_loop.md")
                assert poll(lambda: instance().get("spooled") == 0 and instance()["up"] is True, 60)
            finally:
                g.stop()
    finally:
        if late is not None:
            late.stop()
        sim.stop()
        sweep(port)


def test_the_documented_route_is_a_valid_alertmanager_config(tmp_path):
    blocks = re.findall(r"```yaml\n(route:.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 1
    path = tmp_path / "alertmanager.yml"
    path.write_text(blocks[0])
    amtool = Path(BINARY or "").with_name("amtool")
    out = subprocess.run([str(amtool), "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr

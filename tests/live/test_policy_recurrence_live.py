"""Recurrence and known-bug workarounds, live (docs/policy.md): the simulated vLLM with the LRU busy
loop of vLLM #43941 (``--mm-lru-bug``), which comes back after every restart once the cache fills
(``--mm-lru-bug-after 1``: the first request of a start — the canary that verifies the restart —
is answered, the next one spins), supervised by a real ``guardian run`` restarting it by command.

- recurrence on: one restart, then the loop's return is escalated as ``recurring`` (naming the
  incident it repeats), and nothing is restarted a second time;
- with a profile allowing the workaround: the second restart carries the catalog's arguments (read
  from the restarted process's own ``/proc/<pid>/cmdline``), the loop stops recurring, status shows
  the workaround; ``guardian workaround clear`` and the next restart runs the configured command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer, read_cmdline
from tests.support.guardian_process import SIM, GuardianProcess, config, sims_on, sweep
from tests.support.wait import poll

pytestmark = pytest.mark.live

BUG = ("--mm-lru-bug", "--mm-lru-bug-after", "1")
FLAG = "--mm-processor-cache-gb 0"
LOOP = ("busy_loop", "engine_stall")


@pytest.fixture
def port():
    p = free_port("127.0.0.1")
    yield p
    sweep(p)


def start(tmp_path, port: int, policy: dict) -> tuple[SimServer, GuardianProcess]:
    first = SimServer(port=port, startup_delay=1.0, extra_args=BUG).start()
    first.wait_ready(60)
    argv = [sys.executable, "-m", SIM, "--port", str(port), "--startup-delay", "1", *BUG]
    extra = config(port, tmp_path, command=argv, policy=policy)
    # the canary is the request that trips the loop; its long timeout lets the busy-loop detector (a
    # 10 s window) name the spin before a timed-out canary calls it an engine stall
    extra["probes"] = {"canary": {"interval": 3, "timeout": 30}}
    # on a loaded two-core runner the spinning thread gets well under a whole core
    extra["detectors"] = {"busy_loop": {"cpu_ratio": 0.25}}
    g = GuardianProcess(tmp_path, port, extra=extra).start()
    return first, g


def busy_loops(g: GuardianProcess) -> list[dict]:
    """The loop's incidents: a busy loop, or an engine stall when the spin was starved of CPU."""
    return sorted((i for i in g.incidents() if i["kind"] in LOOP), key=lambda i: i["opened_at"])


def resolved_loops(g: GuardianProcess, n: int) -> list[dict] | None:
    done = [i for i in busy_loops(g) if i["status"] == "resolved"]
    return done if len(done) >= n else None


def action(inc: dict, name: str, status: str | None = None) -> dict | None:
    return next((a for a in inc["actions"] if a["name"] == name and status in (None, a["status"])), None)


def restarts(g: GuardianProcess) -> int:
    try:
        return len(json.loads((g.state_dir / "restarts.json").read_text()).get("sim", []))
    except FileNotFoundError:
        return 0


def guardian_cli(g: GuardianProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_guardian.cli.main", *args, "-c", str(g.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_loop_that_comes_back_after_the_restart_is_escalated_as_recurring_not_restarted_again(tmp_path, port):
    policy = {
        "recurrence": {"enabled": True, "window": 3600},
        "backoff": {"initial": 1, "max": 1},
        "budget": {"max_restarts": 5, "period": 3600},
    }
    _, g = start(tmp_path, port, policy)
    try:
        first = poll(lambda: resolved_loops(g, 1), 150, every=1)
        assert first, g.log_text()
        assert action(first[0], "starting") is not None
        second = poll(
            lambda: next((i for i in busy_loops(g) if i["id"] != first[0]["id"] and action(i, "restart")), None),
            120,
            every=1,
        )
        assert second is not None, g.log_text()
        escalated = action(second, "restart", "escalated")
        assert escalated is not None and escalated["detail"].startswith(f"recurring {second['kind']}"), second[
            "actions"
        ]
        assert f"see incident {first[0]['id']}" in escalated["detail"]
        time.sleep(5)  # a second blind restart would have begun by now
        assert restarts(g) == 1
        assert len(sims_on(port)) == 1
        again = next(i for i in g.incidents() if i["id"] == second["id"])
        assert action(again, "starting") is None and again["status"] == "firing"
    finally:
        g.stop()


def test_with_the_workaround_allowed_the_second_restart_carries_the_catalogs_arguments_until_cleared(tmp_path, port):
    policy = {
        "backoff": {"initial": 1, "max": 1},
        "budget": {"max_restarts": 5, "period": 3600},
        "profiles": [
            {
                "name": "proven",
                "match": {"target": "sim"},
                "recurrence": {"enabled": True, "window": 3600, "apply_workaround": True},
            }
        ],
    }
    _, g = start(tmp_path, port, policy)
    try:
        assert poll(lambda: resolved_loops(g, 1), 150, every=1), g.log_text()
        after_first = g.require_target()
        assert FLAG not in read_cmdline(after_first["pid"])
        done = poll(lambda: resolved_loops(g, 2), 180, every=1)
        assert done, g.log_text()
        second = done[-1]
        assert second["diagnosis"][0]["id"] == "vllm-mm-cache-lru-busy-loop"
        applied = action(second, "workaround", "applied")
        assert applied is not None and FLAG in applied["detail"], second["actions"]
        t = poll(lambda: (t := g.target()) and t["serving"] and t["pid"] != after_first["pid"] and t, 30)
        assert t, g.log_text()
        assert FLAG in read_cmdline(t["pid"])  # the restarted process's own argv
        assert t["profile"] == "proven" and t["workaround"]["args"] == FLAG.split()
        time.sleep(12)  # four canaries: with the cache off the loop does not come back
        assert len(busy_loops(g)) == 2 and restarts(g) == 2
        assert SimServer(port=port).complete(timeout=10)["choices"][0]["text"]
        cleared = guardian_cli(g, "workaround", "clear", "sim")
        assert cleared.returncode == 0, cleared.stderr
        assert poll(lambda: (t := g.target()) and t["workaround"] is None, 10)
        answer = guardian_cli(g, "restart", "sim")
        assert answer.returncode == 0 and "restart started" in answer.stdout, answer.stdout + answer.stderr
        back = poll(lambda: (n := g.target()) and n["pid"] != t["pid"] and n["serving"] and n, 60)
        assert back, g.log_text()
        assert FLAG not in read_cmdline(back["pid"]) and "--mm-lru-bug" in read_cmdline(back["pid"])
    finally:
        g.stop()

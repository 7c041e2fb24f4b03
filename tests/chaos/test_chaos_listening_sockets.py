"""Hostile listening sockets: neighbours that listen on a supervised server's port at other
addresses, started before it — ``127.0.0.2:P`` and an IPv6-only ``[::]:P`` whose argv says
``vllm serve --port P``, and 64 more sockets on ``127.0.0.3``… ``127.0.0.66`` — against a real
``guardian run`` (remediate mode, a command restart, autodiscovery on) and a real simulated vLLM
on ``127.0.0.1:P``; then the server's engine spins (a busy loop) and the guardian restarts it.

What must hold: the configured target is the server (what answers ``127.0.0.1:P``), never a
neighbour; no neighbour is ever in a target's tree, every neighbour outlives the restart; the
incident is the server's ``busy_loop``; the neighbours are counted (status ``other_listeners``,
metric ``guardian_target_port_other_listeners``) and the two whose argv claims the port are said
once and ignored; the status and readiness answer throughout.
"""

from __future__ import annotations

import re
import threading
from contextlib import ExitStack
import time
import urllib.error
import urllib.request

from tests.support.guardian_process import GuardianProcess, command_restart, fire, sweep
from tests.support.squatters import Bind, Squatter, claims, port_free_everywhere
from tests.support.wait import poll
from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer

CROWD = 64  # sockets on 127.0.0.3 .. 127.0.0.66, one process


def ready_code(http_port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/targets/sim/ready", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def metric(http_port: int, name: str, target: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}{{target="{target}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


class Watch:
    """Polls the guardian's status and readiness in the background: every pid seen in a target's
    tree, and every time one of them did not answer."""

    def __init__(self, g: GuardianProcess, http_port: int) -> None:
        self.g, self.http_port = g, http_port
        self.in_trees: set[int] = set()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            status = self.g.status()
            if status is None:
                self.failures.append("status did not answer")
            else:
                self.in_trees |= {p["pid"] for t in status["targets"] for p in t["processes"]}
            if ready_code(self.http_port) not in (200, 503):
                self.failures.append("ready did not answer")
            self._stop.wait(1.0)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_neighbours_on_the_servers_port_are_counted_ignored_and_never_acted_on(tmp_path):
    port, http_port = port_free_everywhere(), free_port()
    extra = {
        "autodiscover": True,
        "targets": [command_restart(port, tmp_path)],
        "api": {"http": f"127.0.0.1:{http_port}"},
    }
    with ExitStack() as stack:  # unwound last-in first: the guardian, the servers, the neighbours
        v4 = stack.enter_context(Squatter([Bind("127.0.0.2", port)], claim=claims(port)))
        v6 = stack.enter_context(Squatter([Bind("::", port, v6only=True)], claim=claims(port)))
        crowd = stack.enter_context(Squatter([Bind(f"127.0.0.{i}", port) for i in range(3, 3 + CROWD)]))
        neighbours = (v4, v6, crowd)
        stack.callback(sweep, port)  # the server the guardian started in its place
        sim = SimServer(port=port, startup_delay=0.5).start()
        stack.callback(sim.stop)
        sim.wait_ready(60)
        g = GuardianProcess(tmp_path, port, extra=extra).start()
        stack.callback(g.stop)
        assert g.wait_ready(90), g.log_text()
        with Watch(g, http_port) as watch:
            target = g.require_target()
            assert target["pid"] == sim.pid
            assert (target["other_listeners"], target["port_verified"]) == (CROWD + 2, True)
            assert metric(http_port, "guardian_target_port_other_listeners", "sim") == CROWD + 2
            fire(sim, "busy_loop")
            assert g.wait_incident("busy_loop", 60), g.log_text()
            restarted = poll(lambda: (t := g.target()) and t["serving"] and t["pid"] != sim.pid and t, 120)
            assert restarted, g.log_text()
            time.sleep(2)  # a few more looks at status and readiness after the restart
        kinds = {i["kind"] for i in g.incidents() if i["target"]["name"] == "sim"}
        assert kinds == {"busy_loop"}, kinds
        assert all(n.alive() for n in neighbours)
        assert watch.in_trees and not watch.in_trees & {n.pid for n in neighbours}
        assert watch.failures == [], watch.failures[:5]
        assert restarted["other_listeners"] == CROWD + 2
        log = g.log_text()
        for claimant in (v4, v6):
            said = rf"process {claimant.pid}@\d+ looks like a vLLM server but is not followed"
            assert len(re.findall(said, log)) == 1

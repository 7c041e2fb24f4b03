"""A hostile neighbour on the node: processes whose argv says ``vllm serve --port <a real server's
port>`` (one started before the real server, one after), the real server's API key in a Secret
file ending in a newline, and HTTP clients that trickle bytes or hold every connection open —
against a real ``guardian run`` beside real simulated vLLMs (alert mode: autodiscovery also sees
other servers on this machine, which a test must never touch; a wrong finding is an incident).

What must hold: no incident, no drain, no restart (the servers keep their pids); the keyed server
becomes ready (its key, newline stripped, authenticates the canary); each URL is one target, its
socket's owner; the fakes are reported once and ignored; readiness and status answer throughout;
the key appears in no output.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request

from tests.support.guardian_process import GuardianProcess, command_restart
from vllm_guardian.sim.control import SimServer, free_port

KEY = "sk-chaos-Neighbour0123456789"
SLEEPER = "import time; time.sleep(300)"


def fake_vllm(port: int) -> subprocess.Popen:
    """A process that listens on nothing and whose argv claims ``port``."""
    return subprocess.Popen([sys.executable, "-c", SLEEPER, "vllm", "serve", "m", "--port", str(port)])


class Hostile:
    """Trickling clients and connection hogs against the guardian's HTTP listener, in the background."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._trickle, daemon=True) for _ in range(24)]

    def _trickle(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(self.address, timeout=5) as s:
                    for byte in b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 400:
                        if self._stop.is_set():
                            return
                        s.sendall(bytes([byte]))
                        time.sleep(0.3)
            except OSError:
                self._stop.wait(0.1)

    def __enter__(self) -> Hostile:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


def test_a_hostile_neighbour_on_the_node_makes_the_guardian_do_nothing_wrong(tmp_path):
    port, port2, http_port = free_port(), free_port(), free_port()
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")  # a Kubernetes Secret made from a file
    early_fake = fake_vllm(port2)  # older than the server whose port it names
    keyed = SimServer(port=port, startup_delay=0.5, api_key=KEY).start()
    plain = SimServer(port=port2, startup_delay=0.5).start()
    late_fake = fake_vllm(port)
    target = command_restart(port, tmp_path)
    target["api_key_file"] = str(key_file)
    extra = {"autodiscover": True, "targets": [target], "api": {"http": f"127.0.0.1:{http_port}"}}
    g = GuardianProcess(tmp_path, port, extra=extra)
    failures: list[str] = []
    try:
        keyed.wait_ready(60)
        plain.wait_ready(60)
        pids = (keyed.pid, plain.pid)
        g.start()
        assert g.wait_ready(90), g.log_text()
        assert g.wait_ready(60, name=f"vllm-{port2}"), g.log_text()
        ready_url = f"http://127.0.0.1:{http_port}/targets/sim/ready"
        with Hostile(("127.0.0.1", http_port)):
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(ready_url, timeout=10) as r:
                        if r.status != 200:
                            failures.append(f"ready {r.status}")
                except Exception as e:  # noqa: BLE001 - refused, 503 or no answer: all failures here
                    failures.append(f"ready: {e}")
                if g.status() is None:
                    failures.append("status did not answer")
                time.sleep(1.0)
        status = g.status()
        assert status is not None
        targets = {t["name"]: t for t in status["targets"]}
        by_port: dict[int | None, list[dict]] = {}
        for t in status["targets"]:
            by_port.setdefault(t.get("port"), []).append(t)
        assert [t["name"] for t in by_port[port]] == ["sim"]
        (second,) = by_port[port2]
        assert second["name"] == f"vllm-{port2}" and second["pid"] == plain.pid
        assert targets["sim"]["pid"] == keyed.pid
        assert (keyed.pid, plain.pid) == pids
        assert all(s.process is not None and s.process.poll() is None for s in (keyed, plain))
        mine = [i for i in g.incidents() if i["target"]["name"] in ("sim", f"vllm-{port2}")]
        assert mine == []
        log = g.log_text()
        assert log.count(f"{early_fake.pid}") >= 1 and "not followed" in log
        outputs = log + repr(status)
        assert KEY not in outputs
        assert failures == [], failures[:5]
    finally:
        g.stop()
        for p in (early_fake, late_fake):
            p.kill()
            p.wait()
        keyed.stop()
        plain.stop()

"""A pid file its server's user controls, against a real ``guardian run`` beside the simulated vLLM.

The target is matched by ``match.pid_file`` in a directory the server's user (``nobody``) owns;
that user replaced the file by a link (a real ``ln -s``) to the root-owned pid file of another
service (a root ``sleep``), whose process the guardian would otherwise take for the server.

What must hold: the target is not matched, the reason names the link; the other service is
never taken for the target nor signalled; the refusal is counted (``guardian status``
``server_files``, ``guardian_server_files_refused_total``); ``/healthz`` and ``guardian status``
answer throughout.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request

from tests.chaos.chaos_util import needs_root
from tests.support.guardian_process import GuardianProcess, sweep
from tests.support.other_user import as_nobody, users_dir, world_dir
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer, free_port

pytestmark = needs_root


def test_a_pid_file_linked_to_another_services_makes_no_target_of_it(tmp_path):
    port, http_port = free_port(), free_port()
    service = subprocess.Popen(["sleep", "600"])  # another service of root's
    service_pid_file = tmp_path / "service.pid"
    service_pid_file.write_text(f"{service.pid}\n")
    sim = SimServer(port=port, startup_delay=0.5).start()
    with world_dir() as world:
        run = users_dir(world)
        as_nobody("ln", "-s", str(service_pid_file), str(run / "vllm.pid"))
        target = {
            "name": "sim",
            "match": {"pid_file": str(run / "vllm.pid")},
            "api_url": f"http://127.0.0.1:{port}",
            "restart": {"mode": "signal"},
        }
        g = GuardianProcess(
            tmp_path,
            port,
            extra={"targets": [target], "api": {"http": f"127.0.0.1:{http_port}"}, "discovery": {"interval": 1.0}},
        )
        try:
            sim.wait_ready(60)
            g.start()

            def refused():
                st = g.status()
                return st and st.get("server_files", {}).get("refused", {}).get("match.pid_file") and st

            st = poll(refused, 60)
            assert st, g.log_text()
            assert st["targets"] == []
            (unmatched,) = st["unmatched"]
            assert unmatched["target"] == "sim" and "symbolic link" in unmatched["reason"]
            time.sleep(5)  # several discovery passes and ticks: still nothing taken, nothing signalled
            st = g.status()
            assert st is not None and st["targets"] == [] and st["incidents"] == []
            assert service.poll() is None
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
                assert 'guardian_server_files_refused_total{setting="match.pid_file"}' in r.read().decode()
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5) as r:
                assert r.status == 200
        finally:
            sim.stop()
            assert g.stop() == 0, g.log_text()
            service.kill()
            service.wait(10)
            sweep(port)

"""Live: the guardian under the sandbox of deploy/systemd/guardian.service still does its work.

No systemd runs as PID 1 here, so the unit's settings are applied the way systemd applies them
(tests/support/unit_sandbox.py, read from the unit file itself): a read-only system with the
guardian's folder writable, /proc with hidepid=ptraceable, exactly the unit's capabilities, no new
privileges, umask 0077, and its system-call filter and address families as one seccomp filter.
What cannot be emulated here is listed in ``NOT_EMULATED`` and printed.

Under it, against a simulated vLLM that runs as another user (``nobody``): discovery owns the
server's socket through its fd links (CAP_DAC_READ_SEARCH), a busy loop is detected from per-thread
/proc readings, real py-spy stacks of that other user's process land in the evidence
(CAP_SYS_PTRACE), the alert reaches Redis, the old tree is stopped (CAP_KILL, the signal method's
stop) and a replacement launched by restart.mode: command — inheriting the sandbox — comes up and
is verified; the control socket and /healthz answer throughout.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import packaging
import prometheus_client
import pytest
import setproctitle

from tests.support import unit_sandbox
from tests.support.guardian_process import GuardianProcess, config, sweep, trip
from tests.support.wait import poll
from vllm_guardian.bundle import pyspy
from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from vllm_guardian.testing.redis_server import RedisServer

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "guardian.service"
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def in_sandbox(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    argv = [*unit_sandbox.prefix(UNIT, [str(tmp_path)]), sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module", autouse=True)
def say_what_is_not_emulated():
    print("\nunit sandbox, not emulated here:")
    for setting, why in unit_sandbox.NOT_EMULATED.items():
        print(f"  {setting}: {why}")


CHECKS = {
    "capabilities are the unit's four": (
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])",
        lambda out: int(out, 16) == (1 << 19) | (1 << 5) | (1 << 2) | (1 << 34),  # PTRACE KILL DAC_READ_SEARCH SYSLOG
    ),
    "umask is 0077": ("import os; print(oct(os.umask(0)))", lambda out: out == "0o77"),
    "the system is read-only": (
        "import os\ntry:\n    open('/etc/guardian-sandbox-probe', 'w')\nexcept OSError as e:\n    print(e.errno)",
        lambda out: out == "30",  # EROFS
    ),
    "a mount is refused with EPERM": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.mount(b't', b'/mnt', b'tmpfs', 0, None), ctypes.get_errno())",
        lambda out: out == "-1 1",
    ),
    "setuid is refused with EPERM": (
        "import os\ntry:\n    os.setuid(65534)\nexcept OSError as e:\n    print(e.errno)",
        lambda out: out == "1",
    ),
    "a packet socket is refused": (
        "import socket\ntry:\n    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
        "except OSError as e:\n    print(e.errno)",
        lambda out: out == "1",
    ),
    "/dev/kmsg is readable": (
        "import os; fd = os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK); print(len(os.read(fd, 8192)) > 0)",
        lambda out: out == "True",
    ),
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_sandbox_applies_the_units_settings(tmp_path, name):
    code, holds = CHECKS[name]
    res = in_sandbox(tmp_path, code)
    assert res.returncode == 0 and holds(res.stdout.strip()), (res.stdout, res.stderr)


def test_another_users_process_is_visible_with_its_fd_links(tmp_path):
    """hidepid=ptraceable hides nothing from a holder of CAP_SYS_PTRACE; CAP_DAC_READ_SEARCH opens the
    0500 fd directory of another user's process (how a socket is mapped to its owner)."""
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        poll(lambda: os.stat(f"/proc/{other.pid}").st_uid == NOBODY, 10)
        code = f"import os; print(os.stat('/proc/{other.pid}').st_uid, os.listdir('/proc/{other.pid}/fd'))"
        res = in_sandbox(tmp_path, code)
        assert res.stdout.split(" ", 1) == [str(NOBODY), "['0', '1', '2']\n"], (res.stdout, res.stderr)
    finally:
        other.kill()
        other.wait()


@pytest.fixture
def nobody_python():
    """An interpreter that runs the simulated vLLM as ``nobody``, from a copy of the package that
    user can read (the checkout may live where it cannot), with Debian's Python 3.11."""
    where = Path(tempfile.mkdtemp(prefix="guardian-nobody-"))
    try:
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / "vllm_guardian", where / "vllm_guardian", ignore=skip)
        # what the simulated server imports beyond the standard library (setproctitle: a C extension
        # built for Python 3.11, as Debian's is; packaging: the version table it answers /version from)
        for module in (setproctitle, prometheus_client, packaging):
            shutil.copytree(Path(str(module.__file__)).parent, where / module.__name__, ignore=skip)
        script = where / "python"
        script.write_text(
            "#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "
            f'env PYTHONPATH={where} {SYSTEM_PYTHON} "$@"\n'
        )
        for p in [where, *where.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IRGRP | stat.S_IROTH | (0o055 if p.is_dir() else 0))
        script.chmod(0o755)
        yield str(script)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def resolved(g: GuardianProcess, incident_id: str) -> dict | None:
    return next((i for i in g.incidents() if i["id"] == incident_id and i["status"] == "resolved"), None)


def healthz(http_port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=3) as r:
            return r.status
    except OSError:
        return None


def test_under_the_unit_sandbox_the_guardian_finds_captures_alerts_and_restarts(tmp_path, nobody_python):
    port, http_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    first = SimServer(port=port, startup_delay=1.0, python=nobody_python).start()
    with RedisServer() as redis:
        try:
            first.wait_ready(60)
            assert os.stat(f"/proc/{first.pid}").st_uid == NOBODY
            extra = config(port, tmp_path, http_port=http_port)
            extra.update(node="node-a", alerts={"redis_url": redis.url})
            g = GuardianProcess(tmp_path, port, extra=extra).start(wrapper=unit_sandbox.prefix(UNIT, [str(tmp_path)]))
            try:
                t = g.wait_ready(40)
                assert t, g.log_text()
                # the socket's owner, read through another user's fd links
                assert (t["pid"], t.get("port_verified", True)) == (first.pid, True), t
                assert healthz(http_port) == 200
                engine = first.engine_pid()
                trip(port, "busy_loop")
                inc = g.wait_incident("busy_loop", 60)
                assert inc is not None, g.log_text()
                bundle = g.state_dir / "incidents" / inc["id"]
                dump = poll(lambda: next(iter(bundle.glob(f"pyspy-{engine}-*.json")), None), 60)
                assert dump is not None, sorted(p.name for p in bundle.iterdir())
                assert pyspy.parse_dump_json(dump.read_text()), dump.read_text()[:500]
                done = poll(lambda: resolved(g, inc["id"]), 120)
                assert done is not None, g.log_text()
                names = {a["name"] for a in done["actions"]}
                assert {"stopping", "starting", "verifying"} <= names, names
                served = poll(lambda: (s := g.target()) and s["serving"] and s["pid"] != first.pid and s, 30)
                assert served, g.log_text()
                assert os.stat(f"/proc/{served['pid']}").st_uid == 0  # launched by the sandboxed guardian
                events = [json.loads(f["event"]) for _, f in redis.client().xrange("guardian:alerts")]
                assert any(e["kind"] == "busy_loop" for e in events), events
                assert g.status() is not None and healthz(http_port) == 200
            finally:
                assert g.stop() == 0, g.log_text()
        finally:
            first.stop()
            sweep(port)

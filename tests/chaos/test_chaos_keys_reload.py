"""The trust keys file and its reload (``SIGHUP``) against a real ``guardian run`` with gates and
trust keys beside a healthy simulated vLLM, on a real Redis.

A key removed from the file stops verifying at the reload (it once verified until a restart: the
reload said "config unchanged"), and the guardian says which key ids it holds (log line, status
``trust.kids``), never a secret. Then the file is made hostile before each reload: readable by
others, garbage, over 64 KiB, a FIFO no one writes, a symlink to /dev/zero, gone. Each is refused
with its reason (``config.last_reload``, ok false; counted in ``config.reloads``), the keys in
force are kept (a report signed by them is still accepted), nothing hangs, nothing is acted on,
readiness and status answer throughout.
"""

from __future__ import annotations

import json
import os
import signal
import time

from tests.support.guardian_process import GuardianProcess, sims_on, sweep
from tests.support.wait import poll
from tests.chaos.chaos_util import Watcher
from vllm_guardian.gates.trust import Keys, sign
from vllm_guardian.sim.control import SimServer, free_port
from vllm_guardian.testing.redis_server import RedisServer

NODE = "node-a"
NEW, OLD = "new-secret-0123456789abcdef", "old-secret-0123456789abcdef"
BY_NEW = Keys({"new": NEW.encode()}, "new")
BY_OLD = Keys({"old": OLD.encode()}, "old")


def report(rid: str, keys: Keys) -> str:
    m = {
        "instance_id": f"{NODE}/sim",
        "request_id": rid,
        "timestamp": int(time.time()),
        "check_level": "L1",
        "type": "repeated_chars",
        "details": {"output": "!!!!!!!!!!!!"},
    }
    return json.dumps(sign(m, keys))


def write(path, text: str, mode: int = 0o600) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text)
    os.chmod(path, mode)


def hostile_fifo(path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def hostile_symlink(path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


HOSTILE = [
    ("readable by others", lambda p: write(p, f"new {NEW}\n", 0o644), "must be 0600"),
    ("garbage", lambda p: write(p, "\x00\x01 not a key file at all\n"), "expected `kid secret`"),
    ("over 64 KiB", lambda p: write(p, "# pad\n" * 20_000), "larger than 64 KiB"),
    ("a FIFO", hostile_fifo, "not a regular file"),
    ("a symlink to /dev/zero", hostile_symlink, "not a regular file"),
    ("gone", lambda p: p.unlink(), "cannot open"),
]


def test_a_removed_key_stops_verifying_at_the_reload_and_a_hostile_keys_file_changes_nothing(tmp_path):
    port, http_port = free_port(), free_port()
    keys_file = tmp_path / "trust.keys"
    write(keys_file, f"new {NEW}\nold {OLD}\n")
    redis = RedisServer().start()
    sim = SimServer(port=port, startup_delay=0.5).start()
    extra = {
        "node": NODE,
        "alerts": {"redis_url": redis.url},
        "api": {"http": f"127.0.0.1:{http_port}"},
        "gates": {"enabled": True, "interval": 30.0, "trust": {"keys_file": str(keys_file), "max_skew": 2.0}},
    }
    g = GuardianProcess(tmp_path, sim.port, extra=extra)
    client = redis.client()
    reloads = 0

    def reload() -> dict:
        nonlocal reloads
        reloads += 1
        assert g.proc is not None
        g.proc.send_signal(signal.SIGHUP)
        st = poll(lambda: (s := g.status()) and s["config"]["reloads"] >= reloads and s, 20)
        assert st, g.log_text()
        return st

    def counted(outcome: str, n: int) -> bool:
        return bool(poll(lambda: (g.status() or {}).get("gates", {}).get("reports", {}).get(outcome) == n, 20))

    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        assert poll(lambda: client.pubsub_numsub("vllm_health_alert")[0][1] >= 1, 20), g.log_text()
        assert poll(lambda: (g.status() or {}).get("uptime_s", 0) > 3, 20)  # past start + max_skew
        assert g.require_target()["name"] == "sim" and g.status()["trust"]["kids"] == ["new", "old"]  # type: ignore[index]

        with Watcher(g, f"http://127.0.0.1:{http_port}/targets/sim/ready") as watch:
            client.publish("vllm_health_alert", report("by-old-1", BY_OLD))
            assert counted("accepted", 1), g.status()

            write(keys_file, f"new {NEW}\n")  # the old key is retired
            st = reload()
            assert st["trust"]["kids"] == ["new"] and st["config"]["last_reload"]["ok"], st["config"]
            assert "removed old" in st["config"]["last_reload"]["message"]
            client.publish("vllm_health_alert", report("by-old-2", BY_OLD))
            assert counted("bad_signature", 1), g.status()
            client.publish("vllm_health_alert", report("by-new-1", BY_NEW))
            assert counted("accepted", 2), g.status()

            for i, (what, make_hostile, problem) in enumerate(HOSTILE):
                make_hostile(keys_file)
                st = reload()
                last = st["config"]["last_reload"]
                assert not last["ok"] and problem in last["message"], (what, last)
                assert "the running keys are kept (kids new)" in last["message"], (what, last)
                assert st["trust"]["kids"] == ["new"], what
                client.publish("vllm_health_alert", report(f"by-new-after-{i}", BY_NEW))
                assert counted("accepted", 3 + i), (what, g.status())
                write(keys_file, f"new {NEW}\n")  # repaired before the next one
            assert poll(lambda: watch.checks >= 3, 30)

        assert watch.failures == [], watch.failures[:5]
        final = g.status()
        assert final and final["config"]["reloads"] == 1 + len(HOSTILE)
        t = g.require_target()
        assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t
        assert sims_on(sim.port) == [sim.pid]
        log = g.log_text()
        assert NEW not in log and OLD not in log  # key ids only, never a secret
        assert "trust keys kids new (removed old)" in log
    finally:
        g.stop()
        sim.stop()
        redis.stop()
        sweep(sim.port)

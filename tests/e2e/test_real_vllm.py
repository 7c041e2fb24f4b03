"""A real vLLM 0.32 (CPU build, tiny random Llama) supervised by the real ``guardian run``.

One server serves the whole module, in this order: the negatives (warm-up, 60 s of
concurrent load, 60 s idle: no incident at all), then each clearable fault (busy
loop, stall: the plugin ends them when the trigger is removed; the server must
serve again before the next scenario), the leak faults, and last the engine's
death. Each fault scenario gets a fresh guardian, so its incident list is its own.

Onset = the wall time of the first request after the trigger (the plugin starts
the fault on the first engine step after it). Deadlines are generous failure
bounds for a shared 2-core machine, not performance claims; the measured numbers
go to the terminal summary (``results``).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from benchmarks.report import parse_vmrss
from vllm_guardian.sim.control import LoadGenerator
from tests.e2e.harness import (
    E2E_PYTHON,
    FaultSwitch,
    GuardianRun,
    HealthPoller,
    VllmServer,
    cmdline_match,
    command_restart,
    ensure_model,
    fire,
    py_spy_dump,
)
from tests.support.wait import poll

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

SERVER_READY_TIMEOUT = 900.0  # 40-65 s on an idle 2-core machine; minutes when it is shared
GUARDIAN_READY_TIMEOUT = 180.0
DETECT_TIMEOUT = 180.0
RECOVER_TIMEOUT = 180.0
EVIDENCE_TIMEOUT = 90.0  # the guardian's py-spy dumps + a 3 s record, after the incident opens


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        rss = parse_vmrss(fh.read())
    assert rss is not None, f"no VmRSS for pid {pid}"
    return rss


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="module")
def server(workdir):
    assert E2E_PYTHON.exists(), f"{E2E_PYTHON} is missing: run `make e2e-vllm`"
    model = ensure_model()
    s = VllmServer(model, workdir / "faults", workdir / "vllm.log").start()
    try:
        yield s
    finally:
        s.stop()
        assert s.leftovers() == (), s.leftovers()


@pytest.fixture
def switch(server) -> FaultSwitch:
    return FaultSwitch(server.fault_dir)


@pytest.fixture
def ready_server(server, results) -> VllmServer:
    results.setdefault("vllm_server_start_s", server.wait_ready(SERVER_READY_TIMEOUT))
    return server


@pytest.fixture
def guardian(request, ready_server, workdir):
    g = GuardianRun(workdir / f"g-{request.node.name[:40]}", ready_server.port).start()
    try:
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        yield g
    finally:
        assert g.stop() == 0, g.log_text()


def _assert_target_is_the_server(inc: dict, server: VllmServer) -> None:
    assert (inc["target"]["pid"], inc["target"]["starttime"]) == (server.pid, server.starttime)


def _recovered(server: VllmServer) -> None:
    assert poll(lambda: server.serves(timeout=30), RECOVER_TIMEOUT, every=1.0), server.log_tail()


def test_no_incident_during_warm_up_sustained_load_or_idle(server, workdir, results):
    """The guardian watches from before the server is up, through 60 s of load and 60 s idle: nothing."""
    g = GuardianRun(workdir / "g-negatives", server.port, match=cmdline_match(server.port)).start()
    try:
        seen = poll(g.target, 120, every=1.0)
        assert seen is not None and not seen["ready"], (seen, g.log_text())  # watching the warm-up itself
        results["vllm_server_start_s"] = server.wait_ready(SERVER_READY_TIMEOUT)
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        results["warm_up_start_to_first_healthy_canary_s"] = time.time() - server.started_at
        assert g.incidents() == [], g.log_text()

        with LoadGenerator(
            server.url, server.model, clients=4, max_tokens=(1, 256), request_timeout=60.0, max_duration=60.0
        ) as load:
            time.sleep(60)  # the scenario *is* a duration: 60 s of concurrent long and short completions
        stats = load.stats()
        results["load_60s_completions_ok"] = stats.ok
        assert stats.ok >= 20 and stats.errors == 0, stats
        assert g.incidents() == [], g.log_text()

        time.sleep(60)  # and 60 s idle
        assert g.incidents() == [], g.log_text()
        t = g.target()
        assert t is not None and t["ready"] and t["phase"] == "serving", t
        assert {p["role"] for p in t["processes"]} >= {"api_server", "engine_core"}
    finally:
        assert g.stop() == 0, g.log_text()


def test_busy_loop_in_the_engine_opens_busy_loop_on_the_engine_main_thread(ready_server, guardian, switch, results):
    server = ready_server
    engine = server.engine_pid()
    health = HealthPoller(server.host, server.port, period=2.0).start()  # /health all along
    onset = fire(server, switch, "busy_loop")
    try:
        inc = guardian.wait_incident("busy_loop", DETECT_TIMEOUT)
        assert inc is not None, guardian.log_text()
        results["busy_loop_onset_to_incident_s"] = inc["opened_at"] - onset
        _assert_target_is_the_server(inc, server)
        assert inc["signals"]["pid"] == engine and inc["signals"]["tid"] == engine
        assert inc["signals"]["role"] == "engine_core"
        assert switch.onset("busy_loop")["pid"] == engine
        dump = guardian.evidence_mentioning(inc["id"], "_injected_busy_loop", EVIDENCE_TIMEOUT)
        assert dump is not None, guardian.log_text()
        assert "run_busy_loop" in dump.read_text()  # the injected frame, under EngineCoreProc.run_busy_loop
        assert "_injected_busy_loop" in py_spy_dump(engine)
        assert server.health() == 200  # the blind spot: vLLM's /health still answers
        assert [i["kind"] for i in guardian.incidents()] == ["busy_loop"]
    finally:
        probes = health.stop()
        switch.clear("busy_loop")
    assert probes and all(p.status == 200 for p in probes), probes  # the blind spot, throughout
    _recovered(server)


def test_engine_blocked_on_a_lock_opens_engine_stall(ready_server, guardian, switch, results):
    server = ready_server
    engine = server.engine_pid()
    health = HealthPoller(server.host, server.port, period=2.0).start()  # /health all along
    onset = fire(server, switch, "stall")
    try:
        inc = guardian.wait_incident("engine_stall", DETECT_TIMEOUT)
        assert inc is not None, guardian.log_text()
        results["engine_stall_onset_to_incident_s"] = inc["opened_at"] - onset
        _assert_target_is_the_server(inc, server)
        assert inc["signals"]["pid"] == engine
        assert switch.onset("stall")["pid"] == engine
        assert guardian.evidence_mentioning(inc["id"], "_injected_stall", EVIDENCE_TIMEOUT), guardian.log_text()
        assert "_injected_stall" in py_spy_dump(engine)
        assert server.health() == 200
        assert [i["kind"] for i in guardian.incidents()] == ["engine_stall"]
    finally:
        probes = health.stop()
        switch.clear("stall")
    assert probes and all(p.status == 200 for p in probes), probes  # the blind spot, throughout
    _recovered(server)


def test_fault_plugin_leaks_kv_blocks_and_engine_memory(ready_server, switch):
    """The leak faults do what they say on the real engine (what a leak detector will read)."""
    server = ready_server
    engine = server.engine_pid()
    before = _rss_bytes(engine)
    switch.on("rss_leak", "8")  # MiB kept per engine step
    try:
        server.complete("grow", max_tokens=8, timeout=60)
        grown = _rss_bytes(engine)
        assert grown - before >= 48 << 20, (before, grown)
    finally:
        switch.clear("rss_leak")
    server.complete("shrink", max_tokens=1, timeout=60)  # the next step lets go of the ballast
    assert poll(lambda: _rss_bytes(engine) < grown - (32 << 20), 30), (grown, _rss_bytes(engine))

    switch.on("kv_leak")
    for i in range(4):
        server.complete(f"leak {i} " * 40, max_tokens=32, timeout=60)
    idle_with_blocks = poll(
        lambda: (
            server.metric("vllm:num_requests_running") == 0 and (server.metric("vllm:kv_cache_usage_perc") or 0) > 0
        ),
        30,
    )
    assert idle_with_blocks, server.metrics_text()
    assert switch.onset("kv_leak")["pid"] == engine


def test_kv_blocks_never_freed_open_kv_cache_leak(ready_server, switch, workdir, results):
    """Finished requests keep their KV blocks: usage stays above the idle floor with nothing running.
    The tiny model's 1 GiB KV cache holds ~65k blocks, so a few leaked requests are a small share:
    the margin is set to match (production default: 0.1 of the cache)."""
    server = ready_server
    g = GuardianRun(
        workdir / "g-kv-leak", server.port, extra={"detectors": {"kv_cache_leak": {"window": 10, "margin": 0.0001}}}
    ).start()
    try:
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        switch.on("kv_leak")
        for i in range(4):
            server.complete(f"leak more {i} " * 40, max_tokens=32, timeout=60)
        idle = time.time()
        inc = g.wait_incident("kv_cache_leak", DETECT_TIMEOUT)
        assert inc is not None, g.log_text()
        assert inc["signals"]["usage"] > inc["signals"]["baseline"]
        _assert_target_is_the_server(inc, server)
        results["kv_cache_leak_idle_to_incident_s"] = inc["opened_at"] - idle
    finally:
        switch.clear("kv_leak")
        assert g.stop() == 0, g.log_text()


def test_engine_death_opens_engine_dead(ready_server, guardian, switch, results):
    server = ready_server
    engine = server.engine_pid()
    onset = fire(server, switch, "die")
    inc = guardian.wait_incident("engine_dead", DETECT_TIMEOUT)
    assert inc is not None, guardian.log_text()
    results["engine_dead_onset_to_incident_s"] = inc["opened_at"] - onset
    _assert_target_is_the_server(inc, server)
    assert inc["signals"]["reason"] in ("engine_core_gone", "api_server_gone", "health_failed")
    assert (inc["signals"]["api_pid"], inc["signals"]["api_starttime"]) == (server.pid, server.starttime)
    assert switch.onset("die")["pid"] == engine
    assert [i["kind"] for i in guardian.incidents()] == ["engine_dead"]


def test_busy_loop_is_remediated_in_command_mode_and_the_new_server_answers(workdir, results):
    """Not dry-run: the guardian drains, stops the whole tree, starts the configured argv itself and
    verifies the new server with a canary. Runs on its own server (it is replaced)."""
    import psutil

    from vllm_guardian.netaddr import free_port

    port = free_port("127.0.0.1")
    faults = workdir / "faults-restart"
    old = VllmServer(ensure_model(), faults, workdir / "vllm-restart.log", port=port).start()
    switch = FaultSwitch(faults)
    g = None
    try:
        started = old.wait_ready(SERVER_READY_TIMEOUT)
        restart = command_restart(old, workdir / "vllm-restarted.log", stop_timeout=20)
        g = GuardianRun(
            workdir / "g-restart",
            port,
            dry_run=False,
            extra={
                "targets": [{"name": "vllm", "match": {"port": port}, "restart": restart, "drain": {"timeout": 30}}]
            },
        ).start()
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        onset = fire(old, switch, "busy_loop")
        inc = g.wait_incident("busy_loop", DETECT_TIMEOUT)
        assert inc is not None, g.log_text()
        # The trigger must be gone before the replacement's first request (its verify canary),
        # but not before the stop: removing it ends the spin, and a recovered engine resolves the
        # incident before any restart.
        stopping = poll(
            lambda: (
                (t := g.target())
                and (t.get("remediation") or {}).get("phase") in ("stopping", "releasing", "starting", "verifying")
            ),
            DETECT_TIMEOUT,
            every=0.5,
        )
        switch.clear("busy_loop")
        assert stopping, g.log_text()
        done = poll(
            lambda: next((i for i in g.incidents() if i["id"] == inc["id"] and i["status"] == "resolved"), None),
            900,
            every=2.0,
        )
        assert done is not None, g.log_text()
        acts = {a["name"]: a for a in done["actions"]}
        assert {"stopping", "starting", "verifying"} <= set(acts), done["actions"]
        t = g.target()
        assert t is not None and (t["pid"], t["starttime"]) != (old.pid, old.starttime) and t["serving"]
        client = VllmServer(ensure_model(), faults, workdir / "unused.log", port=port)  # a client of the new one
        assert client.complete("hello again", max_tokens=4, timeout=120)["choices"]
        assert not psutil.pid_exists(old.pid) or psutil.Process(old.pid).status() == psutil.STATUS_ZOMBIE
        total = done["resolved_at"] - onset
        results["restart_onset_to_verified_s"] = total
        results["restart_guardian_added_s"] = total - started  # beyond vLLM's own start-up
    finally:
        if g is not None:
            assert g.stop() == 0, g.log_text()
        old.stop()
        for p in psutil.process_iter(["pid", "cmdline"]):  # the replacement the guardian started
            cmdline = p.info["cmdline"] or []
            if str(port) in cmdline and "vllm.entrypoints.openai.api_server" in cmdline:
                try:
                    os.killpg(os.getsid(p.pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def test_busy_loop_behind_an_api_key_beside_a_fake_vllm_naming_its_port_is_caught_and_the_key_leaks_nowhere(
    workdir, results
):
    """vLLM started with --api-key answers 401 to an unauthenticated canary: without the key a hang
    looked like a fast 'not a hang'. Beside it, a process whose argv says ``vllm serve --port <its
    port>`` (started first, listening on nothing) once became a second target for the same URL and
    took the key away. Autodiscovery follows the socket's owner: the real server is the one target
    of its URL, its key is read from its command line (/proc), the busy loop is caught, and the key
    is in none of the guardian's outputs."""
    import subprocess
    import sys

    from vllm_guardian.sim.control import free_port, http_request

    key = "sk-e2e-91b7c4d2f0"
    port = free_port("127.0.0.1")
    faults = workdir / "faults-api-key"
    fake = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(900)", "vllm", "serve", "--port", str(port)]
    )
    server = VllmServer(ensure_model(), faults, workdir / "vllm-api-key.log", port=port, api_key=key)
    switch = FaultSwitch(faults)
    name = f"vllm-{port}"
    g = None
    try:
        server.start()
        server.wait_ready(SERVER_READY_TIMEOUT)
        assert http_request(server.host, port, "GET", "/v1/models")[0] == 401  # the key is enforced
        # autodiscovery (dry run): other servers on this machine may be found too; only ours is judged
        g = GuardianRun(workdir / "g-api-key", port, name=name, extra={"autodiscover": True, "targets": []}).start()
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        mine = [t for t in (g.status() or {}).get("targets", []) if t.get("port") == port]
        assert [(t["name"], t["pid"]) for t in mine] == [(name, server.pid)], mine
        onset = fire(server, switch, "busy_loop")
        inc = poll(
            lambda: next((i for i in g.incidents() if i["kind"] == "busy_loop" and i["target"]["name"] == name), None),
            DETECT_TIMEOUT,
        )
        assert inc is not None, g.log_text()
        results["busy_loop_behind_api_key_beside_a_fake_onset_to_incident_s"] = inc["opened_at"] - onset
        assert inc["signals"]["role"] == "engine_core"
        status = str(g.status())
        assert "not followed" in g.log_text() and str(fake.pid) in g.log_text()
    finally:
        switch.clear("busy_loop")
        if g is not None:
            assert g.stop() == 0, g.log_text()
        server.stop()
        fake.kill()
        fake.wait()
    assert key not in g.log_text() and key not in status
    assert all(key.encode() not in p.read_bytes() for p in g.state_dir.rglob("*") if p.is_file())

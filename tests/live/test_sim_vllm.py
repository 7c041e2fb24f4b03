"""The simulated vLLM server looks like vLLM from outside, and its faults look like the real ones."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vllm_guardian.sim.control import (
    LoadGenerator,
    ProcRef,
    SimServer,
    is_running,
    metric_value,
    proc_ref,
    read_cmdline,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.live

STARTUP = 0.3
FUTEX_X86_64 = "202"
ITERATIONS = "vllm:iteration_tokens_total_count"


# ---- helpers ----------------------------------------------------------------


def thread_stat(pid: int, tid: int | None = None) -> tuple[str, int]:
    """(state, utime+stime ticks) of one thread; the main thread by default."""
    with open(f"/proc/{pid}/task/{tid or pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])


def thread_syscall(pid: int, tid: int | None = None) -> str:
    with open(f"/proc/{pid}/task/{tid or pid}/syscall") as fh:
        return fh.read().split()[0]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        line = next(line for line in fh if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def send_in_background(server: SimServer, **kw) -> threading.Thread:
    """A completion that is expected to hang: fire it and forget it."""

    def call():
        try:
            server.complete(timeout=60, **kw)
        except Exception:  # noqa: BLE001 - the server is torn down under it
            pass

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def engine_ref(server: SimServer) -> ProcRef:
    pid = server.engine_pid()
    ref = None if pid is None else proc_ref(pid)
    assert ref is not None, "no EngineCore child"
    return ref


def metrics(server: SimServer) -> dict[str, float]:
    text = server.metrics_text()
    names = (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:num_preemptions_total",
        ITERATIONS,
    )
    values = {name: metric_value(text, name) for name in names}
    missing = [name for name, v in values.items() if v is None]
    assert not missing, f"/metrics lacks {missing}"
    return {name: v for name, v in values.items() if v is not None}


def idle_metrics(server: SimServer) -> dict[str, float] | None:
    """The metrics, once no request runs or waits; None before."""
    m = metrics(server)
    return m if m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0 else None


@pytest.fixture
def make_server():
    servers: list[SimServer] = []

    def make(*extra: str, startup_delay: float = STARTUP, ready: bool = True) -> SimServer:
        server = SimServer(startup_delay=startup_delay, extra_args=extra).start()
        servers.append(server)
        if ready:
            server.wait_ready(20)
        return server

    yield make
    for server in servers:
        server.stop(timeout=2)
        assert server.leftovers() == ()


@pytest.fixture(scope="module")
def sim():
    with SimServer(startup_delay=STARTUP) as server:
        server.wait_ready(20)
        yield server
    assert server.leftovers() == ()


# ---- what it looks like -----------------------------------------------------


def test_api_server_keeps_its_command_line(sim):
    assert "-m vllm_guardian.sim.vllm.api_server --port" in read_cmdline(sim.pid)


def test_engine_child_is_titled_like_vllm(sim):
    engine = sim.engine_pid()
    assert engine is not None
    with open(f"/proc/{engine}/cmdline", "rb") as fh:
        assert fh.read().startswith(b"VLLM::EngineCore")
    with open(f"/proc/{engine}/comm") as fh:
        assert fh.read().strip() == "VLLM::EngineCor"
    with open(f"/proc/{engine}/stat") as fh:
        assert int(fh.read().rsplit(")", 1)[1].split()[1]) == sim.pid


def test_sim_state_names_the_engine(sim):
    state = sim.state()
    assert (state["engine_pid"], state["engine_alive"], state["fault"]) == (sim.engine_pid(), True, "none")


def test_port_refused_while_engine_loads_hot_then_health_200(make_server):
    server = make_server(startup_delay=1.5, ready=False)
    engine = wait_for(server.engine_pid, what="engine child", timeout=10.0, every=0.05)
    _, ticks0 = thread_stat(engine)
    wait_for(lambda: thread_stat(engine)[1] >= ticks0 + 20, timeout=5, what="engine hot while loading", every=0.05)
    assert server.health() is None  # connection refused, like vLLM during load
    server.wait_ready(20)
    assert server.health() == 200


def test_models_lists_the_served_model_only(sim):
    body = sim.models()
    assert body["object"] == "list"
    assert [(m["id"], m["object"]) for m in body["data"]] == [("sim-model", "model")]


def test_completion_returns_openai_shape(sim):
    body = sim.complete("hello there guardian", max_tokens=5)
    choice = body["choices"][0]
    assert isinstance(choice["text"], str) and choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] == 3
    assert 1 <= usage["completion_tokens"] <= 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_greedy_completion_depends_only_on_the_prompt(sim):
    first = sim.complete("same prompt", max_tokens=12)["choices"][0]["text"]
    assert sim.complete("same prompt", max_tokens=12)["choices"][0]["text"] == first


def test_completion_advances_engine_counters(sim):
    before = metrics(sim)
    sim.complete("count these four words", max_tokens=6)
    after = metrics(sim)
    assert after["vllm:prompt_tokens_total"] == before["vllm:prompt_tokens_total"] + 4
    assert after["vllm:generation_tokens_total"] > before["vllm:generation_tokens_total"]
    assert after["vllm:request_success_total"] == before["vllm:request_success_total"] + 1
    assert after[ITERATIONS] > before[ITERATIONS]


def test_metrics_carry_vllm_labels(sim):
    from prometheus_client.parser import text_string_to_metric_families

    samples = [s for fam in text_string_to_metric_families(sim.metrics_text()) for s in fam.samples]
    names = {s.name for s in samples}
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:iteration_tokens_total_bucket",
        ITERATIONS,
        "vllm:iteration_tokens_total_sum",
    } <= names
    assert all(s.labels["model_name"] == "sim-model" and s.labels["engine"] == "0" for s in samples)
    reasons = {s.labels["finished_reason"] for s in samples if s.name == "vllm:request_success_total"}
    assert reasons == {"stop", "length"}


def test_kv_usage_returns_to_zero_when_idle_without_leak(sim):
    sim.complete("free my blocks", max_tokens=8)
    idle = wait_for(
        lambda: idle_metrics(sim),
        what="idle engine",
        timeout=10.0,
        every=0.05,
    )
    assert idle["vllm:kv_cache_usage_perc"] == 0


@pytest.mark.parametrize(
    "body, status",
    [
        ({"model": "other-model", "prompt": "hi"}, 404),
        ({"model": "sim-model", "prompt": "hi", "max_tokens": 0}, 400),
        ({"model": "sim-model", "prompt": 7}, 400),
        ({"model": "sim-model", "prompt": "hi", "temperature": -1}, 400),
        ({"model": "sim-model", "prompt": "hi", "max_tokens": 5000}, 400),
    ],
)
def test_bad_completion_requests_are_refused_with_json_errors(sim, body, status):
    got, data = sim.request("POST", "/v1/completions", body)
    assert got == status
    assert json.loads(data)["error"]["code"] == status


@pytest.mark.parametrize("body", [{"fault": "meltdown"}, {"fault": "rss_leak", "rate_mb_s": -1}, {}])
def test_unknown_faults_are_refused(sim, body):
    assert sim.request("POST", "/sim/fault", body)[0] == 400


def test_unknown_path_is_404(sim):
    assert sim.request("GET", "/nope")[0] == 404


# ---- load -------------------------------------------------------------------


def test_load_generator_drives_healthy_progress(sim):
    iterations = metrics(sim)[ITERATIONS]
    with LoadGenerator(sim.url, sim.model, clients=2, max_tokens=(1, 16)) as load:
        wait_for(lambda: load.ok >= 6, what="six answered completions", timeout=10.0, every=0.05)
    stats = load.stop()
    assert stats.errors == 0 and not load.running
    assert metrics(sim)[ITERATIONS] > iterations


def test_load_generator_stops_by_itself_at_its_request_bound(sim):
    load = LoadGenerator(sim.url, sim.model, clients=2, max_requests=3, max_tokens=(1, 4)).start()
    wait_for(lambda: not load.running, what="load generator to finish", timeout=10.0, every=0.05)
    assert (load.ok, load.errors) == (3, 0)


def test_a_load_generator_stopped_without_waiting_leaves_its_hung_clients_at_exit(make_server):
    server = make_server()
    with LoadGenerator(server.url, server.model, clients=2, request_timeout=60) as load:
        wait_for(lambda: load.ok >= 2, what="two answered completions", timeout=10.0, every=0.05)
        server.set_fault("stall")
        wait_for(lambda: _in_request(server), what="a client in a hung request", timeout=10.0)
        load.stop(timeout=0.2)
    assert load.running  # the exit did not wait out the 60 s request timeout of the hung clients
    server.stop(timeout=2)  # they end with the server
    wait_for(lambda: not load.running, what="the hung clients to end with the server", timeout=10.0, every=0.05)


def _in_request(server: SimServer) -> bool:
    m = metrics(server)
    return (m.get("vllm:num_requests_running") or 0) + (m.get("vllm:num_requests_waiting") or 0) >= 1


def test_load_generator_counts_refused_requests_as_errors():
    load = LoadGenerator("http://127.0.0.1:9", "sim-model", clients=1, max_requests=2).start()
    wait_for(lambda: not load.running, what="load generator to finish", timeout=10.0, every=0.05)
    assert (load.ok, load.errors) == (0, 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LoadGenerator("http://10.1.2.3:8000", "m"),
        lambda: LoadGenerator("http://example.com:8000", "m"),
        lambda: SimServer(host="0.0.0.0"),
    ],
)
def test_only_loopback_addresses_are_accepted(make):
    with pytest.raises(ValueError):
        make()


# ---- faults -----------------------------------------------------------------


def test_busy_loop_spins_the_engine_main_thread_while_health_says_200(make_server):
    server = make_server()
    engine = server.engine_pid()
    server.set_fault("busy_loop")
    send_in_background(server)
    _, ticks = thread_stat(engine)
    wait_for(lambda: thread_stat(engine)[1] >= ticks + 30, what="engine main thread hot", timeout=10.0, every=0.05)
    frozen = metrics(server)[ITERATIONS]
    _, ticks = thread_stat(engine)
    wait_for(
        lambda: thread_stat(engine)[1] >= ticks + 30, what="engine main thread still hot", timeout=10.0, every=0.05
    )
    assert thread_syscall(engine) == "running"
    assert metrics(server)[ITERATIONS] == frozen
    assert server.health() == 200


def test_busy_loop_frame_is_named_by_py_spy(make_server):
    server = make_server()
    engine = server.engine_pid()
    server.set_fault("busy_loop")
    send_in_background(server)
    _, ticks = thread_stat(engine)
    wait_for(lambda: thread_stat(engine)[1] >= ticks + 10, what="engine main thread hot", timeout=10.0, every=0.05)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    dump = subprocess.run([py_spy, "dump", "--pid", str(engine)], capture_output=True, text=True, timeout=30)
    assert "VLLM::EngineCore" in dump.stdout
    assert "_ghost_key_spin" in dump.stdout


def test_stall_blocks_the_engine_main_thread_in_a_futex_without_cpu(make_server):
    server = make_server()
    engine = server.engine_pid()
    server.set_fault("stall")
    send_in_background(server)
    wait_for(
        lambda: thread_stat(engine)[0] == "S" and thread_syscall(engine) == FUTEX_X86_64,
        what="engine main thread in futex wait",
        timeout=10.0,
        every=0.05,
    )
    _, ticks = thread_stat(engine)
    window_end = time.monotonic() + 0.5
    while time.monotonic() < window_end:  # a measuring window, not a wait for behaviour
        assert server.health() == 200
    assert thread_stat(engine)[1] - ticks <= 2


def test_die_turns_health_503_then_the_api_server_exits_0(make_server):
    server = make_server()
    server.set_fault("die")
    send_in_background(server)
    wait_for(lambda: server.health() == 503, what="/health 503", timeout=10.0, every=0.05)
    assert server.wait(timeout=10) == 0


def test_no_exit_on_engine_death_keeps_the_api_server_up(make_server):
    server = make_server("--no-exit-on-engine-death", "--death-exit-delay", "0.2")
    server.set_fault("die")
    send_in_background(server)
    wait_for(lambda: server.health() == 503, what="/health 503", timeout=10.0, every=0.05)
    with pytest.raises(subprocess.TimeoutExpired):
        server.wait(timeout=1.0)


def test_kv_leak_keeps_usage_up_while_nothing_runs(make_server):
    server = make_server()
    server.set_fault("kv_leak")
    for _ in range(3):
        server.complete("hi", max_tokens=8)
    idle = wait_for(
        lambda: idle_metrics(server),
        what="idle engine",
        timeout=10.0,
        every=0.05,
    )
    assert idle["vllm:kv_cache_usage_perc"] == pytest.approx(3 / 64)


def test_rss_leak_grows_engine_rss_at_about_the_rate(make_server):
    server = make_server()
    engine = server.engine_pid()
    rss0, t0 = rss_bytes(engine), time.monotonic()
    server.set_fault("rss_leak", rate_mb_s=32)
    wait_for(lambda: rss_bytes(engine) >= rss0 + 24 * 2**20, what="engine RSS +24 MiB", timeout=10.0, every=0.05)
    rate = (rss_bytes(engine) - rss0) / (time.monotonic() - t0) / 2**20
    assert 10 <= rate <= 64
    assert server.metric(ITERATIONS) is not None and server.health() == 200


# ---- stopping ---------------------------------------------------------------


def test_stop_takes_the_whole_tree_down_gracefully(make_server):
    server = make_server("--with-worker")
    worker = wait_for(
        server.worker_pid, what="the worker to be spawned", timeout=10.0, every=0.05
    )  # slow on a busy machine
    assert worker is not None and read_cmdline(worker).startswith("VLLM::Worker")
    tree = server.tracked()
    assert len(tree) >= 3  # API server, engine, worker (+ multiprocessing's resource tracker)
    assert server.stop() == 0  # 0: it exited on SIGTERM by itself (stop() SIGKILLs only after 5 s)
    assert [ref for ref in tree if is_running(ref)] == []


def test_ignore_sigterm_outlives_sigterm_and_stop_kills_it(make_server):
    server = make_server("--ignore-sigterm")
    server.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        server.wait(timeout=1.0)
    assert server.health() == 200
    assert server.stop(timeout=0.5) == -signal.SIGKILL
    assert server.leftovers() == ()


def test_sigkilled_api_server_leaves_idle_engine_that_exits_on_pipe_eof(make_server):
    server = make_server()
    engine = engine_ref(server)
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=5)
    wait_for(lambda: not is_running(engine), what="orphaned idle engine to exit", timeout=10.0, every=0.05)


def test_sigkilled_api_server_leaves_hung_engine_orphaned_until_stop(make_server):
    server = make_server()
    engine = engine_ref(server)
    server.set_fault("busy_loop")
    send_in_background(server)
    _, ticks = thread_stat(engine.pid)
    wait_for(lambda: thread_stat(engine.pid)[1] >= ticks + 10, what="engine spinning", timeout=10.0, every=0.05)
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=5)
    with open(f"/proc/{engine.pid}/stat") as fh:
        assert int(fh.read().rsplit(")", 1)[1].split()[1]) != server.pid  # re-parented
    assert is_running(engine)
    server.stop()
    assert not is_running(engine)

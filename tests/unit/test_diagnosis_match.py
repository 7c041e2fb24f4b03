"""The matcher names the known bug an observation shows, and nothing when it shows none."""

from __future__ import annotations

import pytest

from vllm_guardian.bundle.pyspy import Frame, ThreadStack
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.diagnosis.matcher import Crash, CrashFrame, Observation, device_idle_note, diagnose

SIGS = all_signatures(load_catalogs())


def th(name, frames, *, active=True, gil=True, tid=None):
    return ThreadStack(
        tid,
        None,
        name,
        active,
        gil and active,
        tuple(Frame(fn, path, 10, path.rsplit("/", 1)[-1]) for fn, path in frames),
    )


SITE = "/usr/lib/python3.11/site-packages"
LRU_SPIN = th(
    "process_input_sockets",
    [
        ("LRUCache.popitem", f"{SITE}/vllm/utils/cache.py"),
        ("LRUCache.__setitem__", f"{SITE}/cachetools/__init__.py"),
        ("EngineCoreProc.process_input_sockets", f"{SITE}/vllm/v1/engine/core.py"),
    ],
    tid=12,
)
MAIN_IDLE = th(
    "MainThread",
    [
        ("Queue.get", "/usr/lib/python3.11/queue.py"),
        ("EngineCoreProc._process_input_queue", f"{SITE}/vllm/v1/engine/core.py"),
    ],
    active=False,
    tid=10,
)
UNRELATED = th("MainThread", [("compute", "/srv/app/numbers.py"), ("<module>", "/srv/app/main.py")], tid=99)
SCHED_CRASH = Crash(
    "AssertionError",
    "",
    (
        CrashFrame(f"{SITE}/vllm/v1/engine/core.py", 400, "step"),
        CrashFrame(f"{SITE}/vllm/v1/core/sched/scheduler.py", 512, "schedule"),
    ),
)


@pytest.mark.parametrize(
    "obs, top",
    [
        (Observation("busy_loop", (MAIN_IDLE, LRU_SPIN), hot_tid=12), "vllm-mm-cache-lru-busy-loop"),
        (Observation("engine_stall", (MAIN_IDLE, LRU_SPIN)), "vllm-mm-cache-lru-busy-loop"),
        (
            Observation(
                "busy_loop",
                (th("MainThread", [("GPUModelRunner._to_list", f"{SITE}/vllm/v1/worker/gpu_model_runner.py")]),),
            ),
            "vllm-cuda-event-sync-wait",
        ),
        (
            Observation(
                "engine_stall",
                (
                    th(
                        "MainThread",
                        [
                            ("Future.result", "/usr/lib/python3.11/concurrent/futures/_base.py"),
                            ("EngineCore.step_with_batch_queue", f"{SITE}/vllm/v1/engine/core.py"),
                        ],
                        active=False,
                    ),
                ),
            ),
            "vllm-flashinfer-gdn-prefill-hang",
        ),
        (
            Observation(
                "engine_stall",
                log_lines=(
                    "(EngineCore pid=1) WARNING No available shared memory broadcast block "
                    "found in 60 seconds. This typically happens",
                ),
            ),
            "vllm-shm-broadcast-stall",
        ),
        (
            Observation(
                "engine_stall",
                (
                    th(
                        "MainThread",
                        [
                            ("MessageQueue.dequeue", f"{SITE}/vllm/distributed/device_communicators/shm_broadcast.py"),
                            ("MultiprocExecutor.get_response", f"{SITE}/vllm/v1/executor/multiproc_executor.py"),
                        ],
                    ),
                ),
            ),
            "vllm-shm-broadcast-stall",
        ),
        (
            Observation("engine_dead", log_lines=("ERROR RPC call to sample_tokens timed out.",)),
            "vllm-mtp-sample-tokens-timeout",
        ),
        (
            Observation("engine_dead", log_lines=("ERROR xgrammar: Failed to advance FSM for request abc",)),
            "vllm-xgrammar-fsm-advance",
        ),
        (
            Observation(
                "kv_cache_leak", cmdline='vllm serve m --kv-transfer-config {"kv_connector":"NixlPushConnector"}'
            ),
            "vllm-kv-leak-nixl-push-abort",
        ),
        (
            Observation(
                "kv_cache_leak", cmdline='vllm serve m --kv-transfer-config {"kv_connector":"LMCacheConnectorV1"}'
            ),
            "vllm-kv-leak-lmcache",
        ),
        (
            Observation(
                "kv_cache_leak",
                log_lines=(
                    "ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 4096",
                ),
            ),
            "vllm-kv-leak-over-length-requests",
        ),
        (Observation("host_memory_leak", role="worker"), "vllm-worker-rpc-deserialize-leak"),
        (Observation("engine_dead", crash=SCHED_CRASH), "vllm-scheduler-assertion"),
        (
            Observation("engine_dead", crash=Crash("AssertionError", "Expected a cached item for mm_hash='abc'")),
            "vllm-mm-input-thread-died",
        ),
        (
            Observation(
                "engine_stall", (MAIN_IDLE,), log_lines=("AssertionError: Expected a cached item for mm_hash='x'",)
            ),
            "vllm-mm-input-thread-died",
        ),
        (
            Observation("engine_dead", crash=Crash("TimeoutError", "RPC call to execute_model timed out.")),
            "vllm-execute-model-timeout",
        ),
        (
            Observation(
                "busy_loop",
                (
                    th(
                        "worker",
                        [("get_validated", "/srv/app/feature_cache.py"), ("fetch_with_retry", "/srv/app/client.py")],
                    ),
                ),
            ),
            "app-cache-ghost-key-retry-loop",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_known_signature_is_named_first(obs, top):
    found = diagnose(SIGS, obs)
    assert found and found[0].id == top, [m.id for m in found]


@pytest.mark.parametrize(
    "obs",
    [
        Observation("busy_loop", (UNRELATED,), hot_tid=99),
        Observation("engine_stall", (UNRELATED, th("worker", [("sleep", "/srv/app/w.py")], active=False))),
        Observation("engine_dead", log_lines=("INFO Started server process", "INFO 200 OK /v1/completions")),
        Observation("engine_dead", crash=Crash("ValueError", "bad request", (CrashFrame("/srv/app/x.py", 3, "f"),))),
        Observation("kv_cache_leak", cmdline="vllm serve m --port 8000"),
        Observation("accel_memory_leak", (LRU_SPIN,)),  # right stack, wrong incident kind
        Observation("busy_loop"),
    ],
    ids=["unrelated-hot-stack", "unrelated-stall", "plain-logs", "app-crash", "no-connector", "wrong-kind", "nothing"],
)
def test_unrelated_stacks_and_logs_match_nothing(obs):
    assert diagnose(SIGS, obs) == []


def test_the_lru_match_says_what_held_and_what_to_do():
    (m, *_) = diagnose(SIGS, Observation("busy_loop", (MAIN_IDLE, LRU_SPIN), hot_tid=12, device_utilization=0.0))
    text = "\n".join(m.matched)
    assert "LRUCache.popitem (vllm/utils/cache.py)" in text
    assert 'thread "MainThread" (idle' in text and "device idle while the engine spins" in text
    assert m.workaround and "--mm-processor-cache-gb 0" in m.workaround
    assert m.fixed_in == "0.26.0" and "https://github.com/vllm-project/vllm/pull/43595" in m.references
    assert m.confidence == 0.99  # 0.9 + two optional clauses


def test_the_hot_thread_must_be_the_one_the_detector_named():
    obs = Observation("busy_loop", (MAIN_IDLE, LRU_SPIN), hot_tid=10)  # the detector saw the main thread hot
    assert "vllm-mm-cache-lru-busy-loop" not in [m.id for m in diagnose(SIGS, obs)]


@pytest.mark.parametrize(
    "version, conf, note",
    [
        ("0.11.0", 0.95, "fixed in 0.26.0"),
        ("0.33.0", 0.48, "where it is fixed"),
        (None, 0.95, None),
    ],
)
def test_fixed_in_is_compared_with_the_servers_version(version, conf, note):
    (m, *_) = diagnose(SIGS, Observation("busy_loop", (MAIN_IDLE, LRU_SPIN), hot_tid=12, vllm_version=version))
    assert m.confidence == conf
    assert (note is None and not m.notes) or (note and note in m.notes[0])


@pytest.mark.parametrize(
    "kind, util, expected",
    [
        ("busy_loop", 0.0, "device idle while the engine spins (accelerator 0 %)"),
        ("busy_loop", 0.4, None),
        ("busy_loop", None, None),
        ("engine_stall", 0.0, None),
    ],
)
def test_device_idle_note(kind, util, expected):
    assert device_idle_note(kind, util) == expected

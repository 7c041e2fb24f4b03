"""The catalog on real py-spy dumps of real processes.

The LRU program is laid out so that its spinning frame really is ``popitem`` in a
file whose path ends in ``vllm/utils/cache.py``, on a thread named
``process_input_sockets``, while its main thread waits on a queue in
``_process_input_queue`` — the shape of vLLM #43941/#47958 — and the negative is
a real process spinning in unrelated code.
"""

from __future__ import annotations


import pytest

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.evidence import default_locate
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.diagnosis.matcher import Observation, diagnose
from vllm_guardian.host.runner import SubprocessRunner
from tests.support.spinning_programs import spawn

SIGS = all_signatures(load_catalogs())


GHOST_CACHE = '''
import zlib


class FeatureCache:
    """Entries carry a checksum; one entry is corrupt and nothing ever evicts it."""

    def __init__(self):
        self._entries = {"user-42": (b"x" * 200_000, 0)}  # checksum 0: never valid

    def _validate(self, key):
        data, crc = self._entries[key]
        return sum(data) & 0xFFFFFFFF == crc

    def get_with_retry(self, key):
        while True:  # the ghost key: same key, same corrupt entry, forever
            if self._validate(key):
                return self._entries[key][0]
'''

GHOST_APP = """
import queue, threading
from feature_cache import FeatureCache

threading.Thread(target=FeatureCache().get_with_retry, args=("user-42",), name="request-worker",
                 daemon=True).start()
print("ready", flush=True)
queue.Queue().get()
"""

UNRELATED = """
import queue, threading

def compute():
    x = 0
    while True:
        x += 1

threading.Thread(target=compute, name="worker", daemon=True).start()
print("ready", flush=True)
queue.Queue().get()
"""


def _dump(pid: int):
    exe = default_locate("py-spy")
    if exe is None:
        pytest.skip("py-spy is not installed next to this Python")
    res = SubprocessRunner().run(pyspy.dump_argv(exe, pid), 20)
    assert res.returncode == 0, res.error_text
    return pyspy.parse_dump_json(res.text)


def test_a_real_lru_spin_is_named_the_mm_cache_bug(lru_program):
    threads = _dump(lru_program.pid)
    hot = next(t for t in threads if t.name == "process_input_sockets")
    assert hot.frames[0].name.endswith("popitem") and hot.frames[0].filename.endswith("vllm/utils/cache.py")
    found = diagnose(SIGS, Observation("busy_loop", threads, hot_tid=hot.os_thread_id, device_utilization=0.0))
    top = found[0]
    assert top.id == "vllm-mm-cache-lru-busy-loop"
    assert any("_process_input_queue" in line and "MainThread" in line for line in top.matched)
    assert any("device idle while the engine spins" in line for line in top.matched)
    assert (top.workaround or "").startswith("start vLLM with --mm-processor-cache-gb 0")


def test_a_real_ghost_key_retry_loop_is_named_with_its_advice(tmp_path):
    proc = spawn(tmp_path, {"site/feature_cache.py": GHOST_CACHE, "app.py": GHOST_APP}, "app.py")
    try:
        threads = _dump(proc.pid)
        hot = next(t for t in threads if t.name == "request-worker")
        found = diagnose(SIGS, Observation("busy_loop", threads, hot_tid=hot.os_thread_id))
        assert [m.id for m in found] == ["app-cache-ghost-key-retry-loop"]
        advice = found[0].advice or ""
        assert "blacklist" in advice and "version-stamp" in advice
    finally:
        proc.kill()
        proc.wait()


def test_a_real_unrelated_spin_matches_nothing(tmp_path):
    proc = spawn(tmp_path, {"app.py": UNRELATED}, "app.py")
    try:
        threads = _dump(proc.pid)
        hot = next(t for t in threads if t.name == "worker")
        assert diagnose(SIGS, Observation("busy_loop", threads, hot_tid=hot.os_thread_id)) == []
        assert diagnose(SIGS, Observation("engine_stall", threads)) == []
    finally:
        proc.kill()
        proc.wait()

"""The catalog on real py-spy dumps of real processes.

The LRU program is laid out so that its spinning frame really is ``popitem`` in a
file whose path ends in ``vllm/utils/cache.py``, on a thread named
``process_input_sockets``, while its main thread waits on a queue in
``_process_input_queue`` — the shape of vLLM #43941/#47958 — and the negative is
a real process spinning in unrelated code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.evidence import default_locate
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.diagnosis.matcher import Observation, diagnose
from vllm_guardian.host.runner import SubprocessRunner

SIGS = all_signatures(load_catalogs())

CACHE = '''
class LRUCache:
    """A ghost key: the order list names a key the data no longer has, so eviction never shrinks."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.currsize = 0
        self._data = {}
        self._order = []

    def popitem(self):
        while self.currsize > self.maxsize:  # the eviction loop of the bug
            key = self._order[0]
            if key in self._data:
                self.currsize -= self._data.pop(key)
            self._order.append(self._order.pop(0))  # the ghost key comes round again

    def put(self, key, size):
        self._order.append(key)
        self.currsize += size
        self.popitem()
'''

CORE = """
import queue
import threading

from vllm.utils.cache import LRUCache


class EngineCoreProc:
    def __init__(self):
        self.input_queue = queue.Queue()
        self.cache = LRUCache(maxsize=1)

    def process_input_sockets(self):
        self.cache._order.append("ghost")  # touch() of a missing key (the pre-#43595 behaviour)
        self.cache.put("img", 2)

    def _process_input_queue(self):
        return self.input_queue.get()


def main():
    engine = EngineCoreProc()
    t = threading.Thread(target=engine.process_input_sockets, name="process_input_sockets", daemon=True)
    t.start()
    print("ready", flush=True)
    engine._process_input_queue()


main()
"""

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


def _spawn(tmp_path: Path, files: dict[str, str], main: str) -> subprocess.Popen:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / main)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    return proc


def _dump(pid: int):
    exe = default_locate("py-spy")
    if exe is None:
        pytest.skip("py-spy is not installed next to this Python")
    res = SubprocessRunner().run(pyspy.dump_argv(exe, pid), 20)
    assert res.returncode == 0, res.error_text
    return pyspy.parse_dump_json(res.text)


@pytest.fixture
def lru_program(tmp_path):
    proc = _spawn(
        tmp_path,
        {
            "site/vllm/__init__.py": "",
            "site/vllm/utils/__init__.py": "",
            "site/vllm/utils/cache.py": CACHE,
            "site/vllm/v1/__init__.py": "",
            "site/vllm/v1/engine/__init__.py": "",
            "site/vllm/v1/engine/core.py": CORE,
            "run_engine.py": "import vllm.v1.engine.core\n",
        },
        "run_engine.py",
    )
    yield proc
    proc.kill()
    proc.wait()


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
    proc = _spawn(tmp_path, {"site/feature_cache.py": GHOST_CACHE, "app.py": GHOST_APP}, "app.py")
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
    proc = _spawn(tmp_path, {"app.py": UNRELATED}, "app.py")
    try:
        threads = _dump(proc.pid)
        hot = next(t for t in threads if t.name == "worker")
        assert diagnose(SIGS, Observation("busy_loop", threads, hot_tid=hot.os_thread_id)) == []
        assert diagnose(SIGS, Observation("engine_stall", threads)) == []
    finally:
        proc.kill()
        proc.wait()

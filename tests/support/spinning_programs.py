"""Real Python programs that spin the way vLLM bugs do, started as child processes for real py-spy
dumps: ``start_lru_program`` lays out the LRU spin of vLLM #43941/#47958 (``popitem`` in a file whose
path ends in ``vllm/utils/cache.py``, on a thread named ``process_input_sockets``, the main thread
waiting in ``_process_input_queue``); ``spawn`` starts any such layout and waits for its "ready"."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path


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


def spawn(tmp_path: Path, files: dict[str, str], main: str) -> subprocess.Popen:
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


def start_lru_program(tmp_path: Path) -> subprocess.Popen:
    """The LRU spin, running: a fake ``vllm`` package on its path, the engine's two threads started."""
    return spawn(
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

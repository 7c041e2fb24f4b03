"""The ghost-key LRU of vLLM #43941 / #47958, where vLLM has it (``vllm/utils/cache.py``): ``touch``
re-inserts a key that is not there, so eviction pops the ghost again and again and ``currsize``
never drops. ``--mm-lru-bug`` runs ``popitem`` on a thread named ``process_input_sockets`` while the
engine's main thread waits in ``_process_input_queue``: the stacks the catalog names."""

from __future__ import annotations

import queue
import threading


class LRUCache:
    def __init__(self) -> None:
        self.order: dict[str, None] = {"ghost": None}
        self.currsize, self.maxsize = 2, 1

    def touch(self, key: str) -> None:
        self.order[key] = None  # the bug: a missing key is inserted

    def popitem(self) -> None:
        while self.currsize > self.maxsize:
            key = next(iter(self.order))
            del self.order[key]
            self.touch(key)  # the ghost comes back; currsize never drops


def _process_input_queue(q: queue.Queue[object]) -> None:
    """The engine's main thread: waits for input the spinning input thread never hands over."""
    q.get()


def spin_on_the_input_thread() -> None:
    """Start the spin on ``process_input_sockets`` and park the calling thread: never returns."""
    threading.Thread(target=LRUCache().popitem, name="process_input_sockets", daemon=True).start()
    _process_input_queue(queue.Queue())

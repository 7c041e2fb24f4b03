"""vLLM 0.33's stack-dump watchdog (``--watchdog-config``) in the simulated EngineCore.

As vLLM's ``ThreadedWatchDog`` (``vllm/utils/watch_dog.py``): a daemon thread that, when the engine
loop has not fed it for ``timeout`` seconds while enabled, appends every thread's stack
(``faulthandler.dump_traceback``) to ``<dump_dir>/VLLM_STACK_DUMP_for_<name>_<pid>.log``, once per
stall. The engine feeds it before each step and disables it while it waits for input, so an idle
engine never dumps. It only writes: it never kills anything.

``--watchdog-config`` is vLLM's JSON (``{"dump_dir": "...", "timeout": 300, "check_interval": 10}``);
without ``dump_dir`` it is off, as in vLLM.
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from dataclasses import dataclass

SEPARATOR = "=" * 64


@dataclass(frozen=True)
class WatchdogConfig:
    dump_dir: str
    timeout: float = 300.0
    check_interval: float = 10.0


def parse_config(text: str | None) -> WatchdogConfig | None:
    """vLLM's ``--watchdog-config`` JSON; None when off (no ``dump_dir``). Raises ValueError when malformed."""
    if not text:
        return None
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("--watchdog-config: a JSON object")
    if not doc.get("dump_dir"):
        return None
    return WatchdogConfig(str(doc["dump_dir"]), float(doc.get("timeout", 300)), float(doc.get("check_interval", 10)))


class WatchDog:
    def __init__(self, name: str, cfg: WatchdogConfig, clock=time.monotonic) -> None:
        self.name = name
        self.cfg = cfg
        self._clock = clock
        self._fed = clock()
        self._enabled = False
        self._dumped = False
        self._count = 0
        self._stop = threading.Event()

    @property
    def path(self) -> str:
        return os.path.join(self.cfg.dump_dir, f"VLLM_STACK_DUMP_for_{self.name}_{os.getpid()}.log")

    def start(self) -> WatchDog:
        os.makedirs(self.cfg.dump_dir, exist_ok=True)
        threading.Thread(target=self._watch, name=f"watchdog_{self.name}", daemon=True).start()
        return self

    def feed(self) -> None:
        self._fed, self._enabled, self._dumped = self._clock(), True, False

    def disable(self) -> None:
        self._enabled = False

    def _watch(self) -> None:
        while not self._stop.wait(self.cfg.check_interval):
            if self._enabled and not self._dumped and self._clock() - self._fed > self.cfg.timeout:
                self._dumped = True
                self.dump("feed timeout")

    def dump(self, why: str) -> None:
        self._count += 1
        with open(self.path, "a") as f:
            f.write(f"\n>>> Call stack dump #{self._count} at {time.ctime()} due to {why}\n\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.write(f"\n{SEPARATOR}\n")

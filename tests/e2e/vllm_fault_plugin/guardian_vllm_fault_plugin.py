"""A vLLM general plugin (test only) that injects engine faults when trigger files appear.

vLLM calls ``register()`` in each of its processes (entry point group
``vllm.general_plugins``). With ``GUARDIAN_FAULT_DIR`` set, it wraps

- ``vllm.v1.engine.core.EngineCore.step`` (and ``step_with_batch_queue``): at the
  start of every engine step the trigger directory is listed, and the first step
  after a trigger appears — i.e. the first request after it — starts the fault:

  ``busy_loop``  a pure-Python ``while True`` (``_injected_busy_loop``) on the
                 engine's main thread; ends when the trigger file is removed;
  ``stall``      blocked on a ``threading.Lock`` (``_injected_stall``), waking once
                 a second only to see whether the trigger file was removed;
  ``die``        ``os._exit(DIE_EXIT_CODE)``: the EngineCore vanishes;
  ``rss_leak``   every step keeps N MiB (the file's content, default 4) alive until
                 the trigger is removed;

  On a data-parallel server (``--data-parallel-size N``: one ``EngineCore_DP<k>`` process per
  rank) a ``busy_loop``, ``stall`` or ``die`` trigger whose content is ``dp_rank=<k>`` starts
  only in the engine of rank k (its process title, ``VLLM::EngineCore_DP<k>``, says its rank);
  the other ranks go on serving. An empty trigger starts in whichever engine steps first.

- ``vllm.v1.core.kv_cache_manager.KVCacheManager.free``: ``kv_leak`` present →
  a finished request's KV blocks are never returned to the pool;

- ``vllm.v1.core.sched.scheduler.Scheduler._update_after_schedule`` (called from
  ``Scheduler.schedule``): ``sched_assert`` present → an ``assert`` fails there,
  so an ``AssertionError`` rises through the real scheduler's ``schedule`` and
  EngineCore dies with vLLM's own "EngineCore encountered a fatal error" path.

- ``vllm.model_executor.layers.logits_processor.LogitsProcessor.forward`` (the logits
  of every sampled token and of ``prompt_logprobs``, in the worker): the model answers
  garbage with HTTP 200 while its trigger is present —

  ``logits_noise``  Gaussian noise added to the logits (std: the file's content, default
                    10): fluent-looking random tokens, a much higher perplexity;
  ``logits_nan``    every logit NaN: NaN logprobs (vLLM then cannot encode them);
  ``logits_permute`` fluent but wrong: the logits of a set of whole-word tokens (the
                    file's content: their ids, whitespace-separated; empty: every token)
                    are rotated by one place, so where the model would say word *i* it
                    says word *i+1*. Finite, as peaked and as confident as before (a
                    permutation keeps entropy and top-1), plain words — only the answers
                    change. ``whole_word_ids`` picks such ids from a ``tokenizer.json``.

When a fault starts, ``<dir>/<fault>.onset`` gets ``{"t": wall time, "pid": ...}``
(written once per trigger: remove it with the trigger to re-arm). Without the env
variable the plugin patches nothing. Touches only its trigger directory.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

ENV_DIR = "GUARDIAN_FAULT_DIR"
BUSY_LOOP = "busy_loop"
STALL = "stall"
DIE = "die"
RSS_LEAK = "rss_leak"
KV_LEAK = "kv_leak"
SCHED_ASSERT = "sched_assert"
FAULTS = (DIE, BUSY_LOOP, STALL, RSS_LEAK, KV_LEAK, SCHED_ASSERT)
SCHED_ASSERT_MESSAGE = (
    "scheduler invariant broken: preempted request rescheduled (injected by the guardian fault plugin)"
)
SCHEDULER_HOOK = "_update_after_schedule"
BLOCKING = (DIE, BUSY_LOOP, STALL)  # at most one runs; this is the priority order
DIE_EXIT_CODE = 17
DEFAULT_RSS_MB_PER_STEP = 4
ONSET_SUFFIX = ".onset"
WRAPPED_MARK = "_guardian_fault_wrapped"
STEP_METHODS = ("step", "step_with_batch_queue")
LOGITS_NOISE = "logits_noise"
LOGITS_NAN = "logits_nan"
LOGITS_PERMUTE = "logits_permute"
OUTPUT_FAULTS = (LOGITS_NAN, LOGITS_NOISE, LOGITS_PERMUTE)  # the first present wins
DEFAULT_NOISE_STD = 10.0

log = logging.getLogger("vllm.guardian_fault_plugin")


# ---------------------------------------------------------------- pure decisions
def read_triggers(names: Iterable[str]) -> frozenset[str]:
    """The known fault names among a directory listing (onset markers and strangers ignored)."""
    return frozenset(n for n in names if n in FAULTS)


def blocking_fault(triggers: Iterable[str]) -> str | None:
    """The one blocking fault to run now (death before busy loop before stall), or None."""
    present = set(triggers)
    return next((f for f in BLOCKING if f in present), None)


def parse_rss_mb(text: str) -> int:
    """MiB to keep per step from a trigger file's content; the default when empty or not a positive int."""
    try:
        mb = int(text.strip())
    except ValueError:
        return DEFAULT_RSS_MB_PER_STEP
    return mb if mb > 0 else DEFAULT_RSS_MB_PER_STEP


def parse_noise_std(text: str) -> float:
    """The noise std from a trigger file's content; the default when empty or not a positive number."""
    try:
        std = float(text.strip())
    except ValueError:
        return DEFAULT_NOISE_STD
    return std if std > 0 and std == std and std != float("inf") else DEFAULT_NOISE_STD


def parse_token_ids(text: str, vocab_size: int) -> list[int]:
    """The distinct token ids (< ``vocab_size``) in a trigger file, in order; every id when fewer than two."""
    ids: list[int] = []
    for word in text.split():
        try:
            i = int(word)
        except ValueError:
            continue
        if 0 <= i < vocab_size and i not in ids:
            ids.append(i)
    return ids if len(ids) >= 2 else list(range(vocab_size))


def whole_word_ids(tokenizer_json: dict) -> list[int]:
    """Ids of a byte-level BPE's whole-word tokens (a leading space, then letters only), by id."""
    vocab = (tokenizer_json.get("model") or {}).get("vocab") or {}
    return sorted(i for t, i in vocab.items() if t.startswith("\u0120") and len(t) > 2 and t[1:].isalpha())


def rotated(ids: list[int]) -> list[int]:
    """Where each id's logit comes from: id ``ids[k]`` gets the logit of ``ids[k-1]``."""
    return ids[-1:] + ids[:-1]


def onset_name(fault: str) -> str:
    return fault + ONSET_SUFFIX


_RANK_IN_TITLE = re.compile(r"EngineCore_DP(\d+)")


def parse_dp_rank(text: str) -> int | None:
    """The rank a blocking trigger is for (``dp_rank=1``); None (any engine) when it names none."""
    m = re.fullmatch(r"\s*dp_rank\s*=\s*(\d+)\s*", text)
    return int(m.group(1)) if m else None


def rank_of_title(title: str) -> int | None:
    """The data-parallel rank of an engine from its process title (``VLLM::EngineCore_DP1`` -> 1)."""
    m = _RANK_IN_TITLE.search(title)
    return int(m.group(1)) if m else None


def _own_rank() -> int | None:
    try:
        import setproctitle  # vLLM's dependency: it titles its engines with it
    except ImportError:
        return None
    return rank_of_title(setproctitle.getproctitle())


# ---------------------------------------------------------------- the faults themselves
def _injected_busy_loop(still_on: Callable[[], bool], check_every: float = 0.5) -> int:
    """Spin in pure Python (no syscall but one stat per ``check_every``) until ``still_on()`` is False.

    Returns the number of iterations. ``time.monotonic`` is a vDSO call, not a syscall.
    """
    spins = 0
    next_check = time.monotonic() + check_every
    while True:
        spins += 1
        if time.monotonic() >= next_check:
            if not still_on():
                return spins
            next_check = time.monotonic() + check_every


def _injected_stall(still_on: Callable[[], bool], check_every: float = 1.0) -> int:
    """Block on a lock nobody releases, waking every ``check_every`` only to look for the clear.

    Returns the number of wake-ups.
    """
    lock = threading.Lock()
    lock.acquire()
    wakeups = 0
    while not lock.acquire(timeout=check_every):
        wakeups += 1
        if not still_on():
            return wakeups
    return wakeups  # unreachable: nobody else holds a reference to the lock


# ---------------------------------------------------------------- the OS seam
class FaultDir:
    """The trigger directory: which faults are switched on, and the onset markers."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def triggers(self) -> frozenset[str]:
        try:
            return read_triggers(os.listdir(self.path))
        except OSError:
            return frozenset()

    def is_on(self, fault: str) -> bool:
        return (self.path / fault).exists()

    def read(self, fault: str) -> str:
        try:
            return (self.path / fault).read_text()
        except OSError:
            return ""

    def mark_onset(self, fault: str, wall: float, pid: int) -> bool:
        """Write ``<fault>.onset`` unless it exists; True when this call wrote it."""
        target = self.path / onset_name(fault)
        if target.exists():
            return False
        tmp = self.path / f".{onset_name(fault)}.{pid}.tmp"
        try:
            tmp.write_text(json.dumps({"fault": fault, "t": wall, "pid": pid}))
            os.replace(tmp, target)
        except OSError:
            return False
        return True


class FaultInjector:
    """Decides at the start of each engine step (and on each KV free) what to inject."""

    def __init__(
        self,
        fault_dir: FaultDir,
        exit: Callable[[int], Any] = os._exit,
        wall: Callable[[], float] = time.time,
        pid: Callable[[], int] = os.getpid,
        busy_check_every: float = 0.5,
        stall_check_every: float = 1.0,
        rank: Callable[[], int | None] = _own_rank,
    ) -> None:
        self.dir = fault_dir
        self._rank = rank
        self._exit = exit
        self._wall = wall
        self._pid = pid
        self.busy_check_every = busy_check_every
        self.stall_check_every = stall_check_every
        self.ballast: list[bytes] = []
        self.leaked_frees = 0

    def _onset(self, fault: str) -> None:
        if self.dir.mark_onset(fault, self._wall(), self._pid()):
            log.warning("guardian fault plugin: %s starts in pid %d", fault, self._pid())

    def before_step(self) -> str | None:
        """Run the faults switched on now; returns the blocking fault that ran (after it cleared)."""
        triggers = self.dir.triggers()
        if RSS_LEAK in triggers:
            self._onset(RSS_LEAK)
            self.ballast.append(b"\xa5" * (parse_rss_mb(self.dir.read(RSS_LEAK)) << 20))
        elif self.ballast:
            self.ballast.clear()
        fault = blocking_fault(triggers)
        if fault is None:
            return None
        wanted = parse_dp_rank(self.dir.read(fault))
        if wanted is not None and wanted != self._rank():
            return None  # another data-parallel rank's fault
        self._onset(fault)
        if fault == DIE:
            self._exit(DIE_EXIT_CODE)
        elif fault == BUSY_LOOP:
            _injected_busy_loop(lambda: self.dir.is_on(BUSY_LOOP), self.busy_check_every)
        else:
            _injected_stall(lambda: self.dir.is_on(STALL), self.stall_check_every)
        log.warning("guardian fault plugin: %s cleared in pid %d", fault, self._pid())
        return fault

    def check_scheduler(self) -> None:
        """Inside the scheduler's path: ``sched_assert`` on → an AssertionError (an ``assert`` that fails)."""
        if self.dir.is_on(SCHED_ASSERT):
            self._onset(SCHED_ASSERT)
        assert not self.dir.is_on(SCHED_ASSERT), SCHED_ASSERT_MESSAGE

    def should_free(self) -> bool:
        """False while ``kv_leak`` is on: the request's KV blocks stay allocated."""
        if not self.dir.is_on(KV_LEAK):
            return True
        self._onset(KV_LEAK)
        self.leaked_frees += 1
        return False


class LogitsCorrupter:
    """Decides for each logits tensor whether (and how) to corrupt it."""

    def __init__(
        self, fault_dir: FaultDir, wall: Callable[[], float] = time.time, pid: Callable[[], int] = os.getpid
    ) -> None:
        self.dir, self._wall, self._pid = fault_dir, wall, pid
        self.corrupted = 0

    def fault(self) -> str | None:
        return next((f for f in OUTPUT_FAULTS if self.dir.is_on(f)), None)

    def __call__(self, logits: Any) -> Any:
        if logits is None:
            return logits
        fault = self.fault()
        if fault is None:
            return logits
        if self.dir.mark_onset(fault, self._wall(), self._pid()):
            log.warning("guardian fault plugin: %s starts in pid %d", fault, self._pid())
        self.corrupted += 1
        import torch  # only in a vLLM process, where torch is there

        if fault == LOGITS_NAN:
            return torch.full_like(logits, float("nan"))
        if fault == LOGITS_PERMUTE:
            ids = parse_token_ids(self.dir.read(LOGITS_PERMUTE), int(logits.shape[-1]))
            to = torch.tensor(ids, device=logits.device)
            out = logits.clone()
            out[..., to] = logits[..., torch.tensor(rotated(ids), device=logits.device)]
            return out
        return logits + torch.randn_like(logits) * parse_noise_std(self.dir.read(LOGITS_NOISE))


# ---------------------------------------------------------------- patching
def wrap_logits(original: Callable, corrupter: LogitsCorrupter) -> Callable:
    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        return corrupter(original(self, *args, **kwargs))

    setattr(forward, WRAPPED_MARK, True)
    return forward


def install_logits(logits_processor_cls: type, corrupter: LogitsCorrupter) -> list[str]:
    """Wrap ``forward`` of the logits processor once; the names wrapped now."""
    original = getattr(logits_processor_cls, "forward", None)
    if original is None or getattr(original, WRAPPED_MARK, False):
        return []
    setattr(logits_processor_cls, "forward", wrap_logits(original, corrupter))
    return [f"{logits_processor_cls.__name__}.forward"]


def wrap_step(original: Callable, injector: FaultInjector) -> Callable:
    @functools.wraps(original)
    def step(self, *args, **kwargs):
        injector.before_step()
        return original(self, *args, **kwargs)

    setattr(step, WRAPPED_MARK, True)
    return step


def wrap_free(original: Callable, injector: FaultInjector) -> Callable:
    @functools.wraps(original)
    def free(self, request, *args, **kwargs):
        if injector.should_free():
            return original(self, request, *args, **kwargs)
        return None

    setattr(free, WRAPPED_MARK, True)
    return free


def wrap_scheduler_hook(original: Callable, injector: FaultInjector) -> Callable:
    @functools.wraps(original)
    def hook(self, *args, **kwargs):
        injector.check_scheduler()
        return original(self, *args, **kwargs)

    setattr(hook, WRAPPED_MARK, True)
    return hook


def install(
    engine_core_cls: type, kv_manager_cls: type, injector: FaultInjector, scheduler_cls: type | None = None
) -> list[str]:
    """Wrap the step methods, ``free`` and (given a scheduler class) its post-schedule hook once
    (vLLM may register a plugin twice); the names wrapped now."""
    done = []
    for name in STEP_METHODS:
        original = getattr(engine_core_cls, name, None)
        if original is not None and not getattr(original, WRAPPED_MARK, False):
            setattr(engine_core_cls, name, wrap_step(original, injector))
            done.append(f"{engine_core_cls.__name__}.{name}")
    free = getattr(kv_manager_cls, "free", None)
    if free is not None and not getattr(free, WRAPPED_MARK, False):
        setattr(kv_manager_cls, "free", wrap_free(free, injector))
        done.append(f"{kv_manager_cls.__name__}.free")
    hook = getattr(scheduler_cls, SCHEDULER_HOOK, None) if scheduler_cls is not None else None
    if scheduler_cls is not None and hook is not None and not getattr(hook, WRAPPED_MARK, False):
        setattr(scheduler_cls, SCHEDULER_HOOK, wrap_scheduler_hook(hook, injector))
        done.append(f"{scheduler_cls.__name__}.{SCHEDULER_HOOK}")
    return done


def register() -> None:
    """The vLLM entry point: patch the engine when ``GUARDIAN_FAULT_DIR`` is set."""
    path = os.environ.get(ENV_DIR)
    if not path:
        return
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.engine.core import EngineCore

    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except ImportError:  # a vLLM without the V1 scheduler: the other faults still work
        Scheduler = None
    wrapped = install(EngineCore, KVCacheManager, FaultInjector(FaultDir(path)), Scheduler)
    try:
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
    except ImportError:  # another vLLM layout: the engine faults still work
        LogitsProcessor = None
    if LogitsProcessor is not None:
        wrapped += install_logits(LogitsProcessor, LogitsCorrupter(FaultDir(path)))
    if wrapped:
        log.warning(
            "guardian fault plugin: watching %s for %s; wrapped %s in pid %d",
            path,
            ", ".join(FAULTS + OUTPUT_FAULTS),
            ", ".join(wrapped),
            os.getpid(),
        )

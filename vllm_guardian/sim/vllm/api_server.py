"""The simulated vLLM API server: the HTTP surface vLLM shows, over a spawned engine.

Run as ``python -m vllm_guardian.sim.vllm.api_server --port P [...]`` (the command
line is left as is, so the guardian autodiscovers it like ``-m vllm...api_server``).
It spawns one ``VLLM::EngineCore`` child (multiprocessing 'spawn', as vLLM's CLI
forces), waits while the engine "loads the model" (port not yet listening), then
serves, on stdlib ``http.server``:

- ``GET /health``: 200 while the engine process lives, 503 once it died;
- ``GET /v1/models``, ``GET /version``: static, never touch the engine;
- ``GET /metrics``: vLLM's scheduler metrics, from the stats the engine last
  reported (they freeze when the engine hangs);
- ``POST /v1/completions``: handed to the engine; no timeout of its own;
- ``POST /sim/fault``, ``GET /sim/state``: simulator control, not part of vLLM;
- with ``VLLM_SERVER_DEV_MODE=1``: ``/pause``, ``/resume``, ``/is_paused``, ``/sleep``,
  ``/wake_up``, ``/is_sleeping`` (``sim.vllm.dev_mode``).

Completions speak vLLM's ``logprobs`` (``top_logprobs``), ``prompt_logprobs``, ``echo``
and ``seed`` shapes; greedy answers are deterministic per prompt (``sim_vllm.lm``).
Output faults (``lm.OUTPUT_FAULTS``: garbage answers, flat or NaN logprobs, a high
reference perplexity, no logprobs support) and ``swap_model`` (another model under the
same server) change the answers only; ``none`` ends them.

With ``--api-key K [K2 …]`` (or ``VLLM_API_KEY=K`` in its environment; the option wins, as in
vLLM), every ``/v1/*`` request needs ``Authorization: Bearer <one of the keys>`` and gets 401
``{"error": "Unauthorized"}`` otherwise; ``/health``, ``/metrics``, ``/version`` and ``/sim/*``
stay open, like vLLM's ``AuthenticationMiddleware``.

With ``--api-server-count N`` (N > 1) this process is vLLM's launcher instead: it keeps the
port's socket and the engine, and N ``VLLM::APIServer_<i>`` children serve that one socket
(``sim.vllm.multi_api``); a fault with ``"api_server": i`` hangs one of them.

Engine death: ``/health`` turns 503 at once and, with ``--exit-on-engine-death``
(default), the server exits with status 0 after ``--death-exit-delay`` seconds,
like vLLM's 5 s ``terminate_if_errored`` watchdog. SIGTERM/SIGINT: stop listening,
terminate the engine (SIGKILL after a 1 s grace) and its worker, exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from vllm_guardian.sim.vllm.engine_flood import engine_flood
from vllm_guardian.sim.vllm.full_page import full_page_tail
from vllm_guardian.sim.vllm import dev_mode, lm
from vllm_guardian.sim.vllm.version_states import VersionStates
from vllm_guardian.sim.vllm.data_parallel import EngineGroup, multi_node_args
from vllm_guardian.sim.vllm.multi_api import API_FAULTS, ApiServers, listening_socket
from vllm_guardian.sim.vllm.engine_client import EngineClient
from vllm_guardian.sim.vllm.engine import (
    FAULTS,
    HANG_FAULTS,
    ITERATION_TOKEN_BUCKETS,
    LEAK_FAULTS,
    EngineConfig,
    EngineStats,
    count_tokens,
    start_idle_threads,
)

GRPC_ABSENT = frozenset({"/health", "/metrics", "/version", "/v1/models", "/is_paused", "/is_sleeping"})
LOG = logging.getLogger("guardian.sim_vllm")
MODULE = "vllm_guardian.sim.vllm.api_server"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=MODULE, description="Simulated vLLM OpenAI-compatible server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="sim-model")
    p.add_argument("--startup-delay", type=float, default=2.0, help="seconds of hot model loading")
    p.add_argument("--step-ms", type=float, default=5.0, help="CPU burnt per engine step")
    p.add_argument("--with-worker", action="store_true", help="engine spawns an idle VLLM::Worker")
    p.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="engines (VLLM::EngineCore_DP<k>) behind this API server, with a VLLM::DPCoordinator",
    )
    multi_node_args(p)
    p.add_argument(
        "--api-server-count",
        type=int,
        default=1,
        help="N>1: this process becomes a launcher of N VLLM::APIServer_<i> sharing the port (sim.vllm.multi_api)",
    )
    p.add_argument("--exit-on-engine-death", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--death-exit-delay", type=float, default=5.0)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument(
        "--full-metrics", action="store_true", help="append the unwatched families of a real vLLM page (~50 KB in all)"
    )
    p.add_argument(
        "--flood-engines",
        type=int,
        default=0,
        help="append N engine labels never seen before to every /metrics page (hostile: sim.vllm.engine_flood)",
    )
    p.add_argument(
        "--idle-threads",
        type=int,
        default=0,
        help="extra idle threads over the tree (1/3 in the API server, 2/3 in the engine), like vLLM's thread pools",
    )
    p.add_argument(
        "--mm-processor-cache-gb",
        type=float,
        default=4.0,
        help="vLLM's multi-modal processor cache size; 0 turns it off (and with it the --mm-lru-bug loop)",
    )
    p.add_argument(
        "--mm-lru-bug",
        action="store_true",
        help="the ghost-key LRU busy loop (vLLM #43941) fires at the first request after every start",
    )
    p.add_argument(
        "--mm-lru-bug-after",
        type=int,
        default=0,
        metavar="N",
        help="with --mm-lru-bug: the cache fills after N requests of each start; the loop fires at the next",
    )
    p.add_argument(
        "--api-key",
        nargs="+",
        default=None,
        help="require 'Authorization: Bearer <key>' on /v1/* (default: $VLLM_API_KEY)",
    )
    p.add_argument("--vllm-version", default="0.0.0+sim", help="the vLLM version to act as (0.32.0, 0.33.0, 0.34.0)")
    p.add_argument("--enable-sleep-mode", action="store_true", help="0.34: register /checkpoint/*")
    p.add_argument("--enable-fault-tolerance", action="store_true", help="register the fault-tolerance status")
    p.add_argument(
        "--grpc",
        action="store_true",
        help="act as vLLM's --grpc server: no /health, /metrics, /version, /v1/models over HTTP "
        "(completions and /sim/* stay, for tests to drive it)",
    )
    p.add_argument(
        "--watchdog-config",
        default=None,
        help='vLLM 0.33\'s stack-dump watchdog, e.g. \'{"dump_dir": "/tmp/d", "timeout": 5, "check_interval": 1}\'',
    )
    return p


# ---- metrics ----------------------------------------------------------------


def metric_families(engines: list[tuple[str, EngineStats]], model: str) -> list:
    """vLLM's scheduler metrics, one labelled sample per engine (``engine="0"``, ``"1"`` … on a
    data-parallel server), as prometheus_client families."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    labels = ["model_name", "engine"]

    def family(cls, name: str, doc: str, value) -> object:
        fam = cls(name, doc, labels=labels)
        for engine, stats in engines:
            fam.add_metric([model, engine], value(stats))
        return fam

    success = CounterMetricFamily(
        "vllm:request_success", "Count of successfully processed requests.", labels=labels + ["finished_reason"]
    )
    hist = HistogramMetricFamily(
        "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", labels=labels
    )
    bounds = [floatToGoString(b) for b in ITERATION_TOKEN_BUCKETS] + ["+Inf"]
    for engine, stats in engines:
        success.add_metric([model, engine, "stop"], stats.success_stop)
        success.add_metric([model, engine, "length"], stats.success_length)
        cumulative = list(itertools.accumulate(stats.iteration_token_counts))
        hist.add_metric(
            [model, engine], buckets=list(zip(bounds, cumulative, strict=True)), sum_value=stats.iteration_tokens_sum
        )
    return [
        family(
            GaugeMetricFamily,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            lambda st: st.running,
        ),
        family(
            GaugeMetricFamily,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            lambda st: st.waiting,
        ),
        family(
            GaugeMetricFamily,
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            lambda st: st.kv_usage,
        ),
        family(
            CounterMetricFamily,
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            lambda st: st.num_preemptions,
        ),
        family(
            CounterMetricFamily,
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            lambda st: st.prompt_tokens,
        ),
        family(
            CounterMetricFamily,
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            lambda st: st.generation_tokens,
        ),
        success,
        hist,
        _sleep_state(engines, labels, model),
    ]


def _sleep_state(engines: list[tuple[str, EngineStats]], labels: list[str], model: str):
    """``vllm:engine_sleep_state``: awake 1 unless asleep (a pause leaves it awake, as in vLLM)."""
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily("vllm:engine_sleep_state", "Engine sleep state.", labels=labels + ["sleep_state"])
    for engine, stats in engines:
        fam.add_metric([model, engine, "awake"], 0.0 if stats.asleep else 1.0)
        fam.add_metric([model, engine, "weights_offloaded"], 1.0 if stats.asleep else 0.0)
        fam.add_metric([model, engine, "discard_all"], 0.0)
    return fam


class _StatsCollector:
    def __init__(self, app: SimApp) -> None:
        self._app = app

    def collect(self):
        return metric_families(self._app.engine.per_engine_stats(), self._app.model)


# ---- the engine, seen from the API server -----------------------------------


# ---- the HTTP application ---------------------------------------------------


def _error(status: int, kind: str, message: str, param: str | None = None) -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": kind, "param": param, "code": status}}


class SimApp:
    """Request → (status, body) decisions; the handler only moves bytes."""

    def __init__(
        self,
        model: str,
        engine: EngineClient | EngineGroup,
        config: EngineConfig,
        full_metrics: bool = False,
        flood_engines: int = 0,
        states: VersionStates | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.states = states  # --vllm-version's own endpoints and states (sim.vllm.version_states)
        self.grpc = False  # --grpc: the HTTP paths a gRPC server lacks answer 404 (GRPC_ABSENT)

        self.model = model
        self.full_metrics = full_metrics
        self.flood_engines = flood_engines
        self._flooded = 0  # engine labels named so far by --flood-engines
        self.engine = engine
        self._config = config
        self._created = int(time.time())
        self._lock = threading.Lock()
        self._fault = "none"
        self._faults: set[str] = set()
        self._output_faults: frozenset[str] = frozenset()  # lm.OUTPUT_FAULTS in force
        self._salt = ""  # the "weights": changed by swap_model
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StatsCollector(self))
        self.dev = dev_mode.DevMode(engine) if dev_mode.enabled() else None
        self.front: ApiServers | None = None  # --api-server-count > 1: the API-server processes

    def health(self) -> int:
        return 200 if self.engine.alive else 503

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model,
                    "object": "model",
                    "created": self._created,
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self._config.max_model_len,
                }
            ],
        }

    def metrics(self) -> bytes:
        from prometheus_client import generate_latest

        page = generate_latest(self.registry)
        if self.full_metrics:
            stats = self.engine.stats
            page += full_page_tail(self.model, stats.success_stop + stats.success_length).encode()
        if self.flood_engines:
            with self._lock:
                first, self._flooded = self._flooded, self._flooded + self.flood_engines
            page += engine_flood(1000 + first, self.flood_engines, self.model).encode()
        return page

    def complete(self, body, rank: int | None = None) -> tuple[int, dict]:
        """A completion; ``rank``: the data-parallel rank its ``X-data-parallel-rank`` header names."""
        if not isinstance(body, dict):
            return _error(400, "BadRequestError", "Request body must be a JSON object.")
        model = body.get("model", self.model)
        if model != self.model:
            return _error(404, "NotFoundError", f"The model `{model}` does not exist.", "model")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return _error(400, "BadRequestError", "prompt must be a string.", "prompt")
        max_tokens, temperature = body.get("max_tokens", 16), body.get("temperature", 1.0)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "BadRequestError", "max_tokens must be a positive integer.", "max_tokens")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            return _error(400, "BadRequestError", "temperature must be >= 0.", "temperature")
        with self._lock:
            faults, salt, model = self._output_faults, self._salt, self.model
        ignore = "no_logprobs" in faults  # an older vLLM or a proxy: the extensions are dropped
        logprobs = None if ignore else body.get("logprobs")
        plp = None if ignore else body.get("prompt_logprobs")
        echo = False if ignore else bool(body.get("echo", False))
        for name, v in (("logprobs", logprobs), ("prompt_logprobs", plp)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 20):
                return _error(400, "BadRequestError", f"{name} must be an integer between 0 and 20.", name)
        if self.dev is not None and self.dev.refusing:
            return _error(503, "ServiceUnavailableError", "Generation is paused.")
        if count_tokens(prompt) + max_tokens > self._config.max_model_len:
            return _error(
                400,
                "BadRequestError",
                f"This model's maximum context length is {self._config.max_model_len} tokens. "
                f"However, you requested {count_tokens(prompt) + max_tokens} tokens.",
            )
        done = self.engine.submit(prompt, max_tokens, float(temperature), rank=rank)
        if done is None:
            return _error(
                500, "EngineDeadError", "EngineCore encountered an issue. See stack trace for the root cause."
            )
        if done.finish_reason == "abort":
            return _error(503, "ServiceUnavailableError", "The request was aborted (generation paused).")
        text, finish, completion_tokens = done.text, done.finish_reason, done.completion_tokens
        choice_lp: dict | None = None
        choice_plp: list | None = None
        if faults or salt or logprobs is not None or plp is not None or echo or prompt in lm.KNOWN:
            greedy = temperature == 0
            n = max_tokens if greedy else max(1, done.completion_tokens)
            tokens = lm.greedy_tokens(prompt, n, salt if greedy else salt + done.request_id, faults)
            text, finish, completion_tokens = "".join(tokens), "length", n
            echo_tokens = lm.prompt_tokens(prompt) if echo else None
            if echo:
                text = prompt + text
            if logprobs is not None:
                choice_lp = lm.completion_logprobs(prompt, tokens, logprobs, faults, echo_tokens)
            if plp is not None:
                choice_plp = lm.prompt_logprobs(prompt, faults)
        choice = {"index": 0, "text": text, "logprobs": choice_lp, "finish_reason": finish, "stop_reason": None}
        if choice_plp is not None:
            choice["prompt_logprobs"] = choice_plp
        return 200, {
            "id": done.request_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": done.prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": done.prompt_tokens + completion_tokens,
            },
        }

    def set_fault(self, body) -> tuple[int, dict]:
        name = body.get("fault") if isinstance(body, dict) else None
        if isinstance(body, dict) and body.get("api_server") is not None:
            return self._api_server_fault(name, body["api_server"])
        if name in lm.OUTPUT_FAULTS or name == "swap_model":  # the answers, not the engine
            with self._lock:
                if name == "swap_model":
                    self._salt += "/swapped"
                    self.model = self.model + "-swapped"
                else:
                    self._output_faults = self._output_faults | {name}
                faults = sorted(self._faults | self._output_faults)
            LOG.warning("sim output fault ordered: %s", name)
            return 200, {"fault": name, "faults": faults}
        if name not in FAULTS:
            return _error(
                400,
                "BadRequestError",
                f"fault must be one of {', '.join(FAULTS + lm.OUTPUT_FAULTS + ('swap_model',))}.",
                "fault",
            )
        rate = body.get("rate_mb_s", 8.0)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
            return _error(400, "BadRequestError", "rate_mb_s must be a positive number.", "rate_mb_s")
        rank = body.get("rank")  # one engine of a data-parallel server; all when absent
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.dp_size):
            return _error(400, "BadRequestError", f"rank must be an integer in [0, {self.dp_size}).", "rank")
        with self._lock:
            self._fault = name
            if name in HANG_FAULTS or name in LEAK_FAULTS:
                self._faults.add(name)
            else:
                self._faults -= set(LEAK_FAULTS)
                self._output_faults = frozenset()  # "none" also ends the garbage
            faults = sorted(self._faults | self._output_faults)
        LOG.warning("sim fault ordered: %s%s", name, "" if rank is None else f" (rank {rank})")
        self.engine.set_fault(name, float(rate), rank=rank)
        return 200, {"fault": name, "faults": faults, "rank": rank}

    def _api_server_fault(self, name, index) -> tuple[int, dict]:
        """A hang in one API-server process of an ``--api-server-count`` tree (``sim.vllm.multi_api``)."""
        count = self.front.count if self.front is not None else 0
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            return _error(400, "BadRequestError", f"api_server must be an integer in [0, {count}).", "api_server")
        if name not in API_FAULTS:
            return _error(400, "BadRequestError", f"an API-server fault is one of {', '.join(API_FAULTS)}.", "fault")
        assert self.front is not None
        LOG.warning("sim fault ordered: %s (APIServer_%d)", name, index)
        self.front.set_fault(index, name)
        return 200, {"fault": name, "api_server": index}

    @property
    def dp_size(self) -> int:
        return len(self.engine.engines) if isinstance(self.engine, EngineGroup) else 1

    def state(self) -> dict:
        with self._lock:
            fault, faults = self._fault, sorted(self._faults | self._output_faults)
        group = self.engine if isinstance(self.engine, EngineGroup) else None
        ranks = {} if group is None else {"coordinator_pid": group.coordinator_pid, "engines": _ranks(group)}
        front = {} if self.front is None else {"api_server_pids": self.front.pids}
        return {
            **ranks,
            **front,
            "api_pid": os.getpid(),
            "engine_pid": self.engine.pid,
            "worker_pid": self.engine.worker_pid,
            "engine_alive": self.engine.alive,
            "model": self.model,
            "fault": fault,
            "faults": faults,
            "stats": self.engine.stats.to_dict(),
        }


def _ranks(group: EngineGroup) -> list[dict]:
    return [
        {"rank": k, "pid": e.pid, "alive": e.alive, "stats": e.stats.to_dict()} for k, e in enumerate(group.engines)
    ]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sim-vllm"
    # TCP_NODELAY, as uvicorn sets it: on a kept-alive connection the last segment of a large
    # answer (/metrics) would otherwise wait for the client's delayed ACK (~40 ms)
    disable_nagle_algorithm = True
    server: _Server  # the server that made this handler: it carries the app

    def log_message(self, format, *args) -> None:
        LOG.debug("%s %s", self.address_string(), format % args)

    @property
    def app(self) -> SimApp:
        return self.server.app

    def _authorized(self, path: str) -> bool:
        """vLLM's rule: only paths under /v1 are guarded; a missing or wrong bearer token is 401."""
        tokens = self.server.api_keys
        if not tokens or not (path == "/v1" or path.startswith("/v1/")):
            return True
        scheme, _, param = (self.headers.get("Authorization") or "").partition(" ")
        given = hashlib.sha256(param.encode()).digest()
        ok = scheme.lower() == "bearer" and any(
            hmac.compare_digest(given, hashlib.sha256(t.encode()).digest()) for t in tokens
        )
        if not ok:
            self._json(401, {"error": "Unauthorized"})
        return ok

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if not self._authorized(path):
            return
        states = self.app.states
        if self.app.grpc and path in GRPC_ABSENT:
            self._json(404, {"detail": "Not Found"})  # a --grpc server speaks gRPC: none of these
        elif states is not None and (answer := states.refuse(path) or states.get(path)) is not None:
            self._json(*answer)
        elif path == "/health":
            self._send(self.app.health(), b"", "application/json")
        elif path == "/v1/models":
            self._json(200, self.app.models())
        elif path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

            self._send(200, self.app.metrics(), CONTENT_TYPE_LATEST)
        elif path == "/version":
            self._json(200, {"version": "0.0.0+sim"})
        elif path == "/sim/state":
            self._json(200, self.app.state())
        elif self.app.dev is not None and (answer := self.app.dev.get(path)) is not None:
            self._json(*answer)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        routes = {"/v1/completions": self._complete, "/sim/fault": self.app.set_fault}
        if not self._authorized(path):
            return
        states = self.app.states
        if states is not None and (refused := states.refuse(path)) is not None:
            self._json(*refused)
            return
        if path not in routes and states is not None and states.owns(path):
            try:
                raw = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            except (ValueError, UnicodeDecodeError):
                raw = None
            if (answer := states.post(path, url.query, raw)) is not None:
                self._json(*answer)
                return
        if path not in routes and self.app.dev is not None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = self.app.dev.post(path, url.query)
            if answer is not None:
                self._json(*answer)
                return
        if path not in routes:
            self._json(404, {"detail": "Not Found"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError):
            self._json(*_error(400, "BadRequestError", "Invalid JSON body."))
            return
        self._json(*routes[path](body))

    def _complete(self, body) -> tuple[int, dict]:
        rank = (self.headers.get("X-data-parallel-rank") or "").strip()  # vLLM's header
        return self.app.complete(body, rank=int(rank) if rank.isdigit() else None)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: SimApp, api_keys: tuple[str, ...] = ()) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.api_keys = tuple(k for k in api_keys if k)
        super().__init__(address, _Handler)


# ---- main -------------------------------------------------------------------


def _checkpoint_drain(engine: EngineClient | EngineGroup, mode: str | None) -> None:
    """``/checkpoint/prepare?mode=``: drain as ``/pause`` does (``wait`` waits); None resumes."""
    if mode is None:
        engine.pause(False)
        return
    if mode == "wait":
        while engine.alive and (engine.stats.running or engine.stats.waiting):
            time.sleep(dev_mode.WAIT_POLL_S)
    engine.pause(True, abort=mode == "abort", sleeping=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [sim_vllm] (APIServer pid=%(process)d) %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        LOG.info("[shutdown] received signal %d: stopping", signum)
        stop.set()

    def on_engine_dead(exitcode) -> None:
        LOG.error("EngineCore died (exit code %s); /health now 503", exitcode)
        if args.exit_on_engine_death:
            timer = threading.Timer(args.death_exit_delay, stop.set)
            timer.daemon = True
            timer.start()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_sigterm else on_signal)
    api_threads = args.idle_threads // 3
    config = EngineConfig(
        startup_delay=args.startup_delay,
        step_ms=args.step_ms,
        with_worker=args.with_worker,
        idle_threads=args.idle_threads - api_threads,
        mm_processor_cache_gb=args.mm_processor_cache_gb,
        mm_lru_bug=args.mm_lru_bug,
        watchdog_config=args.watchdog_config,
        mm_lru_after=max(0, args.mm_lru_bug_after),
    )
    start_idle_threads(api_threads, stop)
    if args.headless or args.data_parallel_size_local is not None:  # multi-node data parallel (sim.vllm.multi_node)
        from vllm_guardian.sim.vllm import multi_node

        if args.headless:
            return multi_node.headless_main(
                config, multi_node.local_ranks(args), args.data_parallel_address, args.data_parallel_rpc_port, stop
            )
        client = multi_node.leader_clients(args, EngineClient)
    else:
        client = EngineClient
    engine: EngineClient | EngineGroup = (
        EngineGroup(config, args.data_parallel_size, client, on_engine_dead)
        if args.data_parallel_size > 1
        else EngineClient(config, on_engine_dead)
    )
    engine.start()
    pids = engine.pids if isinstance(engine, EngineGroup) else [engine.pid]
    LOG.info("started EngineCore pid=%s; loading model %s", ",".join(map(str, pids)), args.model)
    if not engine.wait_ready(stop):
        engine.shutdown()
        if stop.is_set():
            return 0
        LOG.error("Engine core initialization failed")
        return 1
    engine.start_output_thread()
    states = VersionStates(
        args.vllm_version,
        engines=args.data_parallel_size,
        sleep_mode=args.enable_sleep_mode,
        fault_tolerance=args.enable_fault_tolerance,
        drain=lambda mode: _checkpoint_drain(engine, mode),
    )
    app = SimApp(args.model, engine, config, args.full_metrics, args.flood_engines, states)
    app.grpc = args.grpc
    try:
        api_keys = tuple(args.api_key or [os.environ.get("VLLM_API_KEY", "")])
        if args.api_server_count > 1:  # the launcher: the app behind a private port, N fronts on the real one
            shared = listening_socket(args.host, args.port)
            httpd = _Server(("127.0.0.1", 0), app, api_keys)
            app.front = ApiServers(args.api_server_count, shared, ("127.0.0.1", httpd.server_address[1]))
            app.front.start()  # the launcher keeps ``shared`` open, as vLLM's keeps its ``sock``
        else:
            httpd = _Server((args.host, args.port), app, api_keys)
    except OSError as exc:
        LOG.error("cannot listen on %s:%d: %s", args.host, args.port, exc)
        engine.shutdown()
        return 1
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True).start()
    LOG.info("Starting vLLM API server on http://%s:%d (model %s)", args.host, args.port, args.model)
    while not stop.wait(0.5):
        pass
    LOG.info("[shutdown] API server: stopping engine client")
    httpd.shutdown()
    httpd.server_close()
    if app.front is not None:
        app.front.shutdown()
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

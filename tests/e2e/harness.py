"""Drive a real vLLM server (from the ``.e2e/venv``) and a real ``guardian run`` (from this venv).

Shared by the e2e suite (``tests/e2e``) and the detection benchmark (``benchmarks``):

- ``ensure_model``: the tiny random-weight Llama under ``.e2e/model`` (made once);
- ``VllmServer``: ``python -m vllm.entrypoints.openai.api_server`` in its own session,
  with the fault plugin's trigger directory in ``GUARDIAN_FAULT_DIR``; tracks its
  tree (pid + starttime) and leaves nothing behind (``SimServer``'s machinery);
- ``FaultSwitch``: writes and removes the plugin's trigger files, reads its onset markers;
- ``GuardianRun``: ``guardian run --dry-run`` on one target, observed through its
  incident files and ``guardian status --json``;
- ``HealthPoller``: what a Kubernetes liveness probe on ``/health`` would have seen;
- ``greedy``, ``reference_seconds``, ``gate_round_seconds``: the completions one gate round
  sends, timed (what the gates cost a server rests on them).

Everything is loopback; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from vllm_guardian.incidents import IncidentStore, incident_to_dict
from vllm_guardian.sim.control import SimServer, http_request, proc_ref

from tests.support.guardian_process import stop_session
from tests.support.wait import poll

ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = ROOT / ".e2e"
E2E_PYTHON = E2E_DIR / "venv" / "bin" / "python"
MODEL_DIR = E2E_DIR / "model"
MAKE_MODEL = Path(__file__).resolve().parent / "make_tiny_model.py"
PLUGIN_DIR = Path(__file__).resolve().parent / "vllm_fault_plugin"
SERVED_MODEL = "tiny-llama"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
FAULT_ENV = "GUARDIAN_FAULT_DIR"


def ensure_model(out: Path = MODEL_DIR, python: Path = E2E_PYTHON, timeout: float = 600.0) -> Path:
    """The tiny model directory, generated with the e2e venv's transformers when missing."""
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    subprocess.run(
        [str(python), str(MAKE_MODEL), str(out)],
        check=True,
        timeout=timeout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return out


def e2e_env(fault_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The vLLM server's environment: 1 GiB of KV cache, offline, the fault plugin's trigger dir."""
    env = dict(os.environ if base is None else base)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(key, None)  # the server runs from .e2e/venv, not from the guardian's venv
    env.update(
        {
            # the fault plugin's source in this tree wins over the copy installed in .e2e/venv
            # (its entry point names the module; a stale install is then never what runs)
            "PYTHONPATH": str(PLUGIN_DIR),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            FAULT_ENV: str(fault_dir),
        }
    )
    return env


class VllmServer(SimServer):
    """A real vLLM OpenAI server on loopback (the tree tracking and teardown of ``SimServer``)."""

    def __init__(
        self,
        model_dir: Path,
        fault_dir: Path,
        log_path: Path,
        port: int | None = None,
        python: Path = E2E_PYTHON,
        extra_args: tuple[str, ...] = (),
        api_key: str | None = None,
    ) -> None:
        fault_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(
            port=port,
            model=SERVED_MODEL,
            env=e2e_env(fault_dir),
            log_path=log_path,
            python=str(python),
            extra_args=extra_args,
            api_key=api_key,
        )
        self.model_dir = model_dir
        self.fault_dir = fault_dir
        self.started_at: float | None = None
        self.ready_at: float | None = None

    @property
    def argv(self) -> list[str]:
        return [
            self.python,
            "-m",
            API_SERVER_MODULE,
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            "512",
            "--dtype",
            "float32",
            *(("--api-key", self.api_key) if self.api_key else ()),
            *self.extra_args,
        ]

    def start(self) -> VllmServer:
        super().start()
        self.started_at = time.time()
        return self

    @property
    def starttime(self) -> int:
        """The API server's starttime (clock ticks after boot, /proc/<pid>/stat field 22)."""
        ref = self._root or proc_ref(self.pid)
        if ref is None:
            raise RuntimeError("vLLM API server is gone")
        return ref.starttime

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Poll /health until 200; the seconds since start. RuntimeError if it exits, TimeoutError at the deadline."""
        if self.ready_at is not None:
            return self.ready_at - (self.started_at or self.ready_at)
        deadline = time.monotonic() + timeout
        while True:
            self._remember_tree()
            if (rc := self.poll()) is not None:
                raise RuntimeError(f"vLLM exited with {rc} before ready:\n{self.log_tail()}")
            if self.health(timeout=2.0) == 200:
                self._remember_tree()
                self.ready_at = time.time()
                return self.ready_at - (self.started_at or self.ready_at)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"vLLM on {self.url} not ready after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self, timeout: float = 20.0) -> int | None:
        return super().stop(timeout)

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None:
            return ""
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def serves(self, timeout: float = 30.0) -> bool:
        """A short completion answers 200."""
        try:
            self.complete("are you back", max_tokens=2, timeout=timeout)
            return True
        except (OSError, RuntimeError):
            return False


class FaultSwitch:
    """The fault plugin's trigger directory, from the test's side."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def on(self, fault: str, content: str = "") -> None:
        tmp = self.path / f".{fault}.tmp"
        tmp.write_text(content)
        os.replace(tmp, self.path / fault)

    def clear(self, fault: str) -> None:
        for name in (fault, fault + ".onset"):
            try:
                (self.path / name).unlink()
            except FileNotFoundError:
                pass

    def onset(self, fault: str) -> dict | None:
        try:
            return json.loads((self.path / (fault + ".onset")).read_text())
        except (OSError, ValueError):
            return None


def fire(server: VllmServer, switch: FaultSwitch, fault: str, timeout: float = 600.0) -> float:
    """Switch ``fault`` on and send the request that trips it; the onset (wall time of that request)."""
    switch.on(fault)
    onset = time.time()

    def request() -> None:
        try:
            server.complete("trip the fault", max_tokens=4, timeout=timeout)
        except (OSError, RuntimeError):
            pass  # a hung or dead engine: the request fails, which is the point

    threading.Thread(target=request, name=f"trip-{fault}", daemon=True).start()
    return onset


def cmdline_match(port: int) -> dict:
    """A target matcher that finds the API server from its spawn on (a port match waits for the
    listening socket, which vLLM 0.32 opens only once its engine is up)."""
    return {"cmdline_regex": rf"{re.escape(API_SERVER_MODULE)} .*--port {port}( |$)"}


class GuardianRun:
    """``guardian run`` (``--dry-run`` unless told otherwise) watching one target (by port unless
    ``match`` says otherwise); state and socket under ``base``."""

    def __init__(
        self,
        base: Path,
        port: int,
        name: str = "vllm",
        python: str = sys.executable,
        extra: dict | None = None,
        match: dict | None = None,
        dry_run: bool = True,
    ) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.state_dir = base / "state"
        self.config_path = base / "guardian.yaml"
        self.log_path = base / "guardian.log"
        self.python = python
        cfg = {
            "node": "e2e",
            "state_dir": str(self.state_dir),
            "autodiscover": False,  # only our server: other tests may run servers too
            "targets": [{"name": name, "match": match or {"port": port}}],
            "api": {"http": None},
        }
        cfg.update(extra or {})
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.dry_run = dry_run

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("guardian not started")
        return self.proc.pid

    def start(self) -> GuardianRun:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "vllm_guardian.cli.main",
                    "run",
                    *(["--dry-run"] if self.dry_run else []),
                    "-c",
                    str(self.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started_at = time.time()
        return self

    def stop(self) -> int | None:
        return stop_session(self.proc, grace=20)

    def incidents(self) -> list[dict]:
        return sorted((incident_to_dict(i) for i in IncidentStore(self.state_dir).list()), key=lambda i: i["opened_at"])

    def wait_incident(self, kind: str, timeout: float) -> dict | None:
        return poll(lambda: next((i for i in self.incidents() if i["kind"] == kind), None), timeout)

    def evidence_mentioning(self, incident_id: str, needle: str, timeout: float) -> Path | None:
        """The first text file of the incident's evidence bundle that contains ``needle`` (polled:
        the capture runs after the incident opens), else None."""

        def look() -> Path | None:
            inc = next((i for i in self.incidents() if i["id"] == incident_id), None)
            if inc is None or not inc["evidence_dir"]:
                return None
            for path in sorted(Path(inc["evidence_dir"]).rglob("*.txt")):
                try:
                    if needle in path.read_text(errors="replace"):
                        return path
                except OSError:
                    continue
            return None

        return poll(look, timeout, every=1.0)

    def status(self) -> dict | None:
        try:
            out = subprocess.run(
                [self.python, "-m", "vllm_guardian.cli.main", "status", "--json", "-c", str(self.config_path)],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            return None
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None

    def target(self) -> dict | None:
        st = self.status()
        if not st:
            return None
        return next((t for t in st["targets"] if t["name"] == self.name), None)

    def wait_ready(self, timeout: float) -> dict | None:
        """The target's status once it is ready (its first canary answered), else None."""
        return poll(lambda: (t := self.target()) and t["ready"] and t, timeout, every=0.5)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass(frozen=True)
class Probe:
    t: float  # wall time the probe was sent
    status: int | None  # HTTP status; None when refused or timed out


def liveness_fired_at(probes: list[Probe], threshold: int = 3) -> float | None:
    """When a liveness probe with this failure threshold would have fired (its ``threshold``-th
    consecutive failure; a failure is anything but 2xx/3xx), else None."""
    run = 0
    for p in probes:
        ok = p.status is not None and 200 <= p.status < 400
        run = 0 if ok else run + 1
        if run >= threshold:
            return p.t
    return None


class HealthPoller:
    """GET /health every ``period`` seconds with a ``timeout`` (a kubelet's liveness probe), in a thread."""

    def __init__(self, host: str, port: int, period: float = 10.0, timeout: float = 1.0) -> None:
        self.host, self.port, self.period, self.timeout = host, port, period, timeout
        self.probes: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness", daemon=True)

    def start(self) -> HealthPoller:
        self._thread.start()
        return self

    def stop(self) -> list[Probe]:
        self._stop.set()
        self._thread.join(self.timeout + 5)
        return list(self.probes)

    def _run(self) -> None:
        while True:
            t = time.time()
            try:
                status: int | None = http_request(self.host, self.port, "GET", "/health", None, self.timeout)[0]
            except OSError:
                status = None
            self.probes.append(Probe(t, status))
            if self._stop.wait(max(0.0, t + self.period - time.time())):
                return


def py_spy_dump(pid: int, timeout: float = 30.0) -> str:
    """``py-spy dump`` of a process (py-spy from this venv), its text; empty when it fails."""
    exe = Path(sys.executable).with_name("py-spy")
    try:
        out = subprocess.run([str(exe), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout + out.stderr


# ---------------------------------------------------------------- the gates' requests, timed
def _completion(server, body: dict, timeout: float, what: str) -> tuple[dict, float]:
    """POST /v1/completions on the served model: (its first choice, seconds); RuntimeError if not 200."""
    t0 = time.monotonic()
    status, raw = http_request(
        server.host, server.port, "POST", "/v1/completions", {"model": server.model, **body}, timeout=timeout
    )
    if status != 200:
        raise RuntimeError(f"{what} completion answered {status}: {raw[:300]!r}")
    return json.loads(raw)["choices"][0], time.monotonic() - t0


def greedy(server, prompt: str, max_tokens: int, timeout: float = 60.0) -> tuple[str, list[float], float]:
    """One greedy completion with logprobs, as a gate sends it: (text, token logprobs, seconds)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": 0, "logprobs": 5}
    choice, seconds = _completion(server, body, timeout, "greedy")
    return choice["text"], choice["logprobs"]["token_logprobs"], seconds


def reference_seconds(server, text: str, timeout: float = 60.0) -> float:
    """The L2 request (``prompt_logprobs`` over ``text``, one token out), timed."""
    body = {"prompt": text, "max_tokens": 1, "temperature": 0, "seed": 0, "prompt_logprobs": 0}
    choice, seconds = _completion(server, body, timeout, "reference")
    if not choice.get("prompt_logprobs"):
        raise RuntimeError("vLLM gave no prompt_logprobs")
    return seconds


def command_restart(server: VllmServer, log_file: Path, **extra) -> dict:
    """A target's ``restart`` block that launches this server's own argv again (``command`` mode),
    with the fault plugin's environment, so the replacement answers to the same trigger files."""
    return {
        "mode": "command",
        "command": list(server.argv),
        "env": e2e_env(server.fault_dir, base={}),
        "ready_timeout": 600,
        "log_file": str(log_file),
        **extra,
    }


def gate_round_seconds(server, prompts: tuple[tuple[str, int], ...], reference: str) -> float:
    """Server seconds of one gate round, its requests one after another: the reference text,
    then each (prompt, max_tokens)."""
    return reference_seconds(server, reference) + sum(greedy(server, p, n)[2] for p, n in prompts)

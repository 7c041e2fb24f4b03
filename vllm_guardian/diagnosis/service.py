"""Diagnosis of one evidence bundle: what the incident most likely is, and (engine_dead) why it died.

Runs off the loop thread, right after the evidence capture, on what the bundle
holds — so it needs nothing from the capture's internals:

- ``capture.json`` (the focus pid, the processes and their roles and command lines),
- ``pyspy-<pid>-<role>.json`` (the threads of each process) and ``watchdog/*.log`` (vLLM's own
  stack dumps, ``--watchdog-config``: matched beside py-spy's),
- ``series.json`` (metric windows) and ``accelerators.json``;

plus, through seams: the target's log tail (``log_tail.read_tail``: file (through ``ServerFiles``), journalctl
via the ``CommandRunner``, the previous container's log via ``KubeClient``), and
the server's ``GET /version`` (``HttpClient``, short timeout; absent when the
server does not answer). The focus process is matched first; the other processes'
dumps are matched when it gives nothing.

Writes into the bundle: ``diagnosis.json`` ({diagnosis, crash, notes,
accelerators, vllm_version}), the diagnosis block into ``summary.txt`` (after its
header, so it is read first) and ``report.html``, each redacted and scrubbed of the
secret values the guardian holds (``scrub``: ``bundle/known_secrets.py``). Never raises: a
failure is logged and the bundle keeps what it had.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vllm_guardian.bundle.evidence import EvidenceCollector, EvidenceContext, EvidenceResult
from vllm_guardian.bundle.manifest import MANIFEST
from vllm_guardian.bundle.pyspy import ThreadStack, parse_dump_json
from vllm_guardian.bundle.watchdog_dumps import BUNDLE_DIR, parse_dump
from vllm_guardian.vllm_versions import is_watchdog_dump
from vllm_guardian.redact import redact_text
from vllm_guardian.fsutil import atomic_write
from vllm_guardian.config.schema import Config, TargetConfig
from vllm_guardian.host.http import HttpClient
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.host.server_files import ServerFiles
from vllm_guardian.incidents.store import incident_to_dict, jsonable
from vllm_guardian.model import Incident
from vllm_guardian.series import metrics as m
from vllm_guardian.diagnosis.catalog_load import all_signatures, load_catalogs
from vllm_guardian.detectors.kinds import spec
from vllm_guardian.diagnosis.forensics import CrashReport, crash_report
from vllm_guardian.diagnosis.log_tail import MAX_BYTES, LogTail, choose_source, read_tail
from vllm_guardian.diagnosis.matcher import Observation, device_idle_note, diagnose
from vllm_guardian.diagnosis.node_view import target_utilization
from vllm_guardian.diagnosis.report_html import DIAGNOSIS_FILE, write_report
from vllm_guardian.diagnosis.signature import Match, Signature
from vllm_guardian.diagnosis.text import diagnosis_lines, insert_into_summary
from vllm_guardian.diagnosis.version import is_version

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient

log = logging.getLogger(__name__)

VERSION_TIMEOUT_S = 2.0
MAX_MATCHES = 5


@dataclass(frozen=True)
class DiagnosisResult:
    """What the diagnosis found; ``diagnosis`` and ``crash`` are the incident's documents of it."""

    matches: tuple[Match, ...] = ()  # best first, at most MAX_MATCHES
    report: CrashReport | None = None  # crash forensics, for a kind that has them
    notes: tuple[str, ...] = ()
    vllm_version: str | None = None
    accelerators: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def diagnosis(self) -> tuple[dict[str, Any], ...]:
        return tuple(mt.to_dict() for mt in self.matches)

    @property
    def crash(self) -> dict[str, Any] | None:
        return self.report.to_dict() if self.report is not None else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def bundle_threads(bundle: Path) -> dict[int, tuple[ThreadStack, ...]]:
    """pid → threads, from every ``pyspy-<pid>-<role>.json`` of the bundle (unparsable ones skipped),
    then the threads of vLLM's own stack dumps in ``watchdog/`` (``--watchdog-config``) after them."""
    out: dict[int, tuple[ThreadStack, ...]] = {}
    for f in sorted((bundle / BUNDLE_DIR).glob("VLLM_STACK_DUMP_for_*.log")):
        named = is_watchdog_dump(f.name)
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if named is not None:
            out[named[1]] = out.get(named[1], ()) + parse_dump(text, pid=named[1])
    for f in sorted(bundle.glob("pyspy-*-*.json")):
        pid = f.name.split("-")[1]
        if not pid.isdigit():
            continue
        try:
            out[int(pid)] = parse_dump_json(f.read_text(encoding="utf-8")) + out.get(int(pid), ())
        except (OSError, ValueError):
            continue
    return out


def metric_values(series: Mapping[str, Any]) -> dict[str, list[float]]:
    """The target-level windows (subject ``""``) as metric → values, oldest first."""
    out: dict[str, list[float]] = {}
    for metric, subjects in (series or {}).items():
        pts = (subjects or {}).get("") if isinstance(subjects, Mapping) else None
        if pts:
            out[metric] = [float(p[1]) for p in pts if len(p) == 2]
    return out


@dataclass(frozen=True)
class CapturedProcesses:
    """What the bundle's manifest (``capture.json``) says of the processes: pid -> role, pid ->
    command line, and the process the capture chose as the hottest."""

    roles: Mapping[int, str] = field(default_factory=dict)
    cmdlines: Mapping[int, str] = field(default_factory=dict)
    hottest_pid: int | None = None

    @classmethod
    def from_manifest(cls, doc: Any) -> CapturedProcesses:
        """From the parsed manifest; what is missing or malformed is left out."""
        if not isinstance(doc, Mapping):
            return cls()
        procs = [p for p in doc.get("processes") or () if isinstance(p, Mapping) and isinstance(p.get("pid"), int)]
        hottest = doc.get("hottest_pid")
        return cls(
            {p["pid"]: str(p.get("role")) for p in procs},
            {p["pid"]: " ".join(p.get("cmdline") or ()) for p in procs},
            hottest if isinstance(hottest, int) else None,
        )


def _shown(mt: Match) -> float:
    """The confidence as the incident shows it (two decimals): what ranks the matches."""
    return round(mt.confidence, 2)


def _keep_best(found: dict[str, Match], mt: Match) -> None:
    """Keep ``mt`` unless a match of the same signature is already there with a higher confidence."""
    if mt.id not in found or _shown(found[mt.id]) < _shown(mt):
        found[mt.id] = mt


class Diagnoser:
    def __init__(
        self,
        signatures: Sequence[Signature],
        *,
        runner: CommandRunner | None = None,
        kube: Callable[[], KubeClient] | None = None,
        http: HttpClient | None = None,
        log_max_bytes: int = MAX_BYTES,
        version_timeout: float = VERSION_TIMEOUT_S,
        scrub: Callable[[str], str] | None = None,
        files: ServerFiles | None = None,
    ) -> None:
        self.signatures = tuple(signatures)
        self._scrub = scrub or (lambda text: text)
        self._runner = runner
        self._files = files
        self._kube = kube
        self._http = http
        self._max_bytes = log_max_bytes
        self._version_timeout = version_timeout

    @classmethod
    def from_config(
        cls,
        cfg: Config,
        *,
        runner: CommandRunner | None = None,
        kube: Callable[[], KubeClient] | None = None,
        http: HttpClient | None = None,
        scrub: Callable[[str], str] | None = None,
        files: ServerFiles | None = None,
    ) -> Diagnoser:
        """The shipped catalogs plus ``diagnosis.catalogs``; ``CatalogError`` at startup when one is bad."""
        d = cfg.diagnosis
        return cls(
            all_signatures(load_catalogs(d.catalogs)),
            runner=runner,
            kube=kube,
            http=http,
            log_max_bytes=d.log_max_bytes,
            scrub=scrub,
            files=files,
        )

    # ------------------------------------------------------------ inputs through seams
    def vllm_version(self, api_url: str | None) -> str | None:
        if not api_url or self._http is None:
            return None
        try:
            r = self._http.request("GET", api_url.rstrip("/") + "/version", self._version_timeout)
            v = r.json().get("version") if r.status == 200 else None
        except Exception:  # noqa: BLE001 - a server that does not answer has no version to give
            return None
        return v if isinstance(v, str) and is_version(v) else None

    def log_tail(self, target_cfg: TargetConfig | None) -> LogTail:
        return read_tail(
            choose_source(target_cfg),
            runner=self._runner,
            kube=self._kube,
            max_bytes=self._max_bytes,
            files=self._files,
        )

    # ------------------------------------------------------------ the decision
    def diagnose(
        self,
        incident: Incident,
        *,
        threads: Mapping[int, Sequence[ThreadStack]],
        focus_pid: int | None,
        roles: Mapping[int, str],
        cmdlines: Mapping[int, str],
        series: Mapping[str, Any],
        accelerators: Sequence[Mapping[str, Any]],
        tail: LogTail | None,
        version: str | None,
    ) -> DiagnosisResult:
        """Pure given its inputs: the matches (best first), the crash document and the notes."""
        kind = incident.kind.value
        util = target_utilization(accelerators, incident.target.name)
        if util is None:
            vals = metric_values(series).get(m.ACCEL_UTIL)
            util = vals[-1] if vals else None
        tid = incident.signals.get("tid")
        base = Observation(
            kind,
            vllm_version=version,
            device_utilization=util,
            metrics=metric_values(series),
            cmdline=" ; ".join(cmdlines.values()),
            log_lines=tuple(tail.lines) if tail is not None else (),
        )
        report = None
        row = spec(kind) if kind else None
        if row is not None and row.forensics:
            report = crash_report(tail or LogTail(None, (), "no log source"), self.signatures, base)
            base = replace(base, log_lines=(), crash=report.crash)  # crash_report already saw the lines
        order = ([focus_pid] if focus_pid in threads else []) + [p for p in threads if p != focus_pid]
        found: dict[str, Match] = {}
        for pid in order or [None]:
            obs = replace(
                base,
                threads=tuple(threads.get(pid, ())) if pid is not None else (),
                hot_tid=tid if isinstance(tid, int) and pid == focus_pid else None,
                role=roles.get(pid) if pid is not None else incident.target.role,
            )
            for mt in diagnose(self.signatures, obs):
                if pid is not None and pid != focus_pid:
                    mt = replace(mt, matched=(f"in process {pid} ({roles.get(pid, '?')})", *mt.matched))
                _keep_best(found, mt)
            if found and pid == focus_pid:
                break
        for mt in report.matches if report is not None else ():
            _keep_best(found, mt)
        ranked = sorted(found.values(), key=lambda mt: (-_shown(mt), -len(mt.matched), mt.id))
        note = device_idle_note(kind, util)
        return DiagnosisResult(
            tuple(ranked[:MAX_MATCHES]),
            report,
            (note,) if note else (),
            version,
            tuple(dict(r) for r in accelerators),
        )

    # ------------------------------------------------------------ the bundle
    def diagnose_bundle(
        self,
        bundle_dir: str | os.PathLike[str],
        incident: Incident,
        *,
        target_cfg: TargetConfig | None = None,
        api_url: str | None = None,
        accelerators: Sequence[Mapping[str, Any]] = (),
    ) -> DiagnosisResult:
        """Reads the bundle, diagnoses, writes diagnosis.json / summary.txt / report.html. Never raises."""
        bundle = Path(bundle_dir)
        try:
            captured = CapturedProcesses.from_manifest(_read_json(bundle / MANIFEST))
            sig_pid = incident.signals.get("pid")
            focus = sig_pid if isinstance(sig_pid, int) else captured.hottest_pid
            series = _read_json(bundle / "series.json") or {}
            tail = self.log_tail(target_cfg)
            res = self.diagnose(
                incident,
                threads=bundle_threads(bundle),
                focus_pid=focus,
                roles=captured.roles,
                cmdlines=captured.cmdlines,
                series=series,
                accelerators=accelerators,
                tail=tail,
                version=self.vllm_version(api_url),
            )
        except Exception as e:
            log.exception("diagnosis of %s failed", bundle)
            return DiagnosisResult(notes=(f"diagnosis failed: {type(e).__name__}: {e}",))
        self.write(bundle, incident, res)
        return res

    def write(self, bundle: Path, incident: Incident, res: DiagnosisResult) -> None:
        diagnosis, crash = list(res.diagnosis), res.crash
        doc = {
            "schema": 1,
            "diagnosis": diagnosis,
            "crash": crash,
            "notes": list(res.notes),
            "vllm_version": res.vllm_version,
            "accelerators": list(res.accelerators),
        }
        try:
            scrub = self._scrub
            atomic_write(bundle / DIAGNOSIS_FILE, scrub(redact_text(json.dumps(jsonable(doc), indent=2))) + "\n")
            summary = bundle / "summary.txt"
            if summary.exists():
                text = summary.read_text(encoding="utf-8")
                if "\nDiagnosis: " not in text:
                    block = diagnosis_lines(diagnosis, crash, res.notes)
                    atomic_write(summary, scrub(redact_text(insert_into_summary(text, block))))
            inc = incident_to_dict(incident)
            inc.update({"diagnosis": diagnosis, "crash": crash})
            write_report(bundle, inc, scrub)
        except OSError as e:
            log.warning("diagnosis files for %s not written: %s", bundle, e)


def capture_then_diagnose(
    collector: EvidenceCollector,
    ctx: EvidenceContext,
    diagnoser: Diagnoser | None,
    *,
    target_cfg: TargetConfig | None = None,
    api_url: str | None = None,
    accelerators: Sequence[Mapping[str, Any]] = (),
) -> tuple[EvidenceResult, DiagnosisResult | None]:
    """One off-loop job: the evidence capture, then (for an incident) its diagnosis on the bundle.
    Returns (EvidenceResult, DiagnosisResult or None); the diagnosis never breaks the capture."""
    res = collector.capture(ctx)
    if diagnoser is None or ctx.incident is None or not res.dir.is_dir():
        return res, None
    return res, diagnoser.diagnose_bundle(
        res.dir, ctx.incident, target_cfg=target_cfg, api_url=api_url, accelerators=accelerators
    )

"""The ``gates`` probe: output-correctness gate rounds, one in flight per target, off the loop.

Every ``gates.interval`` seconds per ready target a job runs ``gates.round.run_round``
(diagnostic and shadow prompts greedily with logprobs, the reference text with
prompt logprobs) and, when the shared state has a fingerprint exchange (built by the assembler
on the one Redis connection), shares the shadow fingerprints with other nodes.
``fold`` (on the loop) keeps the books: it has the round judged (``gates.judge``, and L4
against this node's other instances of the same model and version plus the remote peers:
``gates.l4_judge``), grows or loads the baseline (``gates.baseline``), records the verdict in
the ledger the ``output_corruption`` detector reads and updates the status lines. A new API server for a target clears
its history; a verified restart (``GatesShared.request_rebaseline``) drops its
baseline so it is taken again.

Confirmation: a failing round does not wait ``interval`` for the next one. It schedules a
quick round ``confirm_delay`` seconds later, and so on while rounds keep failing, up to
``confirm_rounds`` of them per failing episode (default: enough for conditions A, C and D
to conclude); a clean round ends the episode and the schedule falls back to ``interval``.
``request_confirmation`` (an external report naming a target) starts such an episode with
a round at once. Their requests are counted like every other round's.

L4 votes: this node's configured targets are the guardian's own evidence; autodiscovered
servers never vote on a configured target, and an L4 failure that only they make is marked
``source="local_peers"``; one that only the remote peers' fingerprints make (judged without
them, the instance agrees) ``source="peers"``. Both are external evidence, a hint that never
restarts alone (``remediation/external.py``; ``gates.l4_judge``). Requested confirmations come at most one
every ``CONFIRM_GAP_S`` (a report flood is not a load on the server).

The shared state (``GatesShared``: ledger, intake, status lines), the trust keys
(``gates.trust``) and the fingerprint exchange are built once by the assembler
(``loop/assemble.py``) and handed in through ``parts.readings.gates``; a bad key file is a
``ConfigError`` at start. Without keys the guardian says once that external evidence can
raise an alert, never a restart.
"""

from __future__ import annotations

from vllm_guardian.gates.baseline import Baseline, BaselineStore
from vllm_guardian.gates.cost import confirmations
from vllm_guardian.gates.exchange import PeerFingerprints
from vllm_guardian.gates.judge import RoundAnswers, judge_round, next_baseline
from vllm_guardian.gates.known_answers import diagnostics_of
from vllm_guardian.gates.evidence import failure_evidence
from vllm_guardian.gates.l4_judge import LocalPeer, fresh_local_peers, judge_l4, shared_fingerprints
from vllm_guardian.gates.ledger import RoundRecord
from vllm_guardian.gates.round import run_round
from vllm_guardian.gates.shared import GatesShared, TargetGates
from vllm_guardian.model import ProcKey
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Schedule, Seen

_BKey = tuple[str, str, str]  # (target, model, version)
CONFIRM_GAP_S = 5.0  # seconds at least between two requested confirmation rounds of a target


class GatesProbe:
    name = "gates"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.cfg = parts.cfg.gates
        self.http, self.clock = parts.seams.http, parts.seams.clock
        self.tracker, self.log = parts.tracker, parts.log
        if parts.readings.gates is None:
            raise ValueError("the gates probe needs the gates' shared state in the readings (loop/assemble.py)")
        self.shared: GatesShared = parts.readings.gates  # built by the assembler, with its keys and exchange
        self.exchange: PeerFingerprints | None = self.shared.exchange
        self.store = BaselineStore(parts.cfg.state_dir)
        self.schedule = Schedule(self.cfg.interval)
        self._baselines: dict[_BKey, Baseline | None] = {}
        self._keys: dict[str, ProcKey] = {}
        self._local: dict[str, LocalPeer] = {}  # target -> its latest shadow fingerprints
        self.max_age = self.cfg.peer_max_age or 3 * self.cfg.interval
        self.n_confirm = confirmations(self.cfg, parts.cfg.detectors.output_corruption)
        self._confirm_left: dict[str, int] = {}  # target -> quick rounds left in its failing episode
        self._quick: set[str] = set()  # targets whose next round is a confirmation
        self._requested_at: dict[str, float] = {}  # target -> when its latest requested round was due

    # ---------------------------------------------------------------- confirmation
    def request_confirmation(self, target: str, reason: str) -> None:
        """Schedule a quick own round for ``target`` (e.g. an external report named it). Any thread."""
        self.shared.request_confirmation(target, reason)

    def _take_requests(self, now: float) -> None:
        for name, reason in self.shared.take_confirmations().items():
            if name not in self.tracker.targets:
                continue
            if name not in self._confirm_left:
                self.log.info("gates %s: confirmation round requested: %s", name, reason)
                self._confirm_left[name] = self.n_confirm
            self._quick.add(name)
            # at most one requested round every CONFIRM_GAP_S: a flood of (signed) reports is not a load
            due = max(now, self._requested_at.get(name, float("-inf")) + CONFIRM_GAP_S)
            self._requested_at[name] = due
            self.schedule.soon(name, due)

    def _after_round(self, name: str, failed: bool, tg: TargetGates, now: float) -> None:
        """A failing round schedules the next quick one (while the episode's budget lasts)."""
        if not failed:
            self._confirm_left.pop(name, None)
            tg.confirming = None
            return
        left = self._confirm_left.get(name, self.n_confirm)
        if left > 0:
            self.schedule.soon(name, now + self.cfg.confirm_delay)
            self._quick.add(name)
            left -= 1
        self._confirm_left[name] = left
        tg.confirming = left

    # ---------------------------------------------------------------- planning
    def jobs(self, now: float, seen: Seen) -> list[Job]:
        self.shared.known_targets = frozenset(self.tracker.targets)
        self._take_requests(now)
        out = []
        for tr in self.tracker.targets.values():
            name = tr.name
            if self._keys.get(name) not in (None, tr.target.key):  # a new API server: a fresh history
                self.shared.ledger.reset(name)
                self._local.pop(name, None)
                self._confirm_left.pop(name, None)
            self._keys[name] = tr.target.key
            if not (tr.target.api_url and tr.api_alive and tr.ready) or tr.hold is not None or tr.retired or tr.grpc:
                continue  # paused or asleep on purpose: no gate round until it resumes
            if not self.schedule.due(name, now):
                continue
            out.append(self._job(name, tr.target.api_url, tr.model, tr.target.key))
        return out

    def _job(self, name: str, url: str, model: str | None, key: ProcKey) -> Job:
        cfg, http, wall = self.cfg, self.http, self.clock.wall
        exchange = self.exchange
        n_requests = len(diagnostics_of(cfg)) + (len(cfg.shadow_prompts) if cfg.shadow else 0) + 4

        def run() -> tuple[ProcKey, RoundAnswers, list[dict[str, str]], str | None]:
            ra = run_round(http, name, url, model, cfg, wall)
            remote: list[dict[str, str]] = []
            note = None
            if exchange is not None and cfg.shadow and ra.complete and ra.answers:
                own = shared_fingerprints(ra)
                remote, note = exchange.share(ra.model, ra.version, name, own, 2 * self.max_age, self.max_age)
            return key, ra, remote, note

        return Job(name, run, cfg.timeout * n_requests + 1, on_start=lambda now: self.schedule.ran(name, now))

    # ---------------------------------------------------------------- folding
    def _baseline(self, bkey: _BKey, notes: list[str]) -> Baseline | None:
        if bkey not in self._baselines:
            b, problem = self.store.load(*bkey)
            if problem:
                notes.append(problem)
            self._baselines[bkey] = b
        return self._baselines[bkey]

    def fold(self, result: tuple[ProcKey, RoundAnswers, list[dict[str, str]], str | None], now: float) -> Folded:
        key, ra, remote, xnote = result
        tr = self.tracker.targets.get(ra.target)
        if tr is None or tr.target.key != key:
            return Folded()  # the round of a server that is gone
        tg = self.shared.targets.setdefault(ra.target, TargetGates())
        tg.requests += ra.requests
        if ra.target in self._quick:
            self._quick.discard(ra.target)
            tg.confirmation_rounds += 1
        notes = list(ra.notes) + ([xnote] if xnote else [])
        if self.shared.take_rebaseline(ra.target):
            self.store.discard(ra.target)
            self._baselines = {k: v for k, v in self._baselines.items() if k[0] != ra.target}
            notes.append("verified restart: baseline taken again")
        if not ra.complete:
            tg.incomplete_rounds += 1
            self._show(ra.target, tg, notes, None, now)
            return Folded()
        if tg.model is not None and (tg.model, tg.version) != (ra.model, ra.version):
            notes.append(
                f"model/version changed from {tg.model} {tg.version} to {ra.model} {ra.version}: its own baseline"
            )
            self.shared.ledger.reset(ra.target)
        tg.model, tg.version = ra.model, ra.version
        bkey = (ra.target, ra.model, ra.version)
        baseline = self._baseline(bkey, notes)
        verdict = judge_round(ra, baseline, self.cfg)
        failures, judged = list(verdict.failures), set(verdict.judged)
        ambiguous = False
        if self.cfg.shadow:
            local = fresh_local_peers(self._local, ra.target, ra.model, ra.version, now, self.max_age)
            configured = tr.target.source == "config"
            l4 = judge_l4(ra, verdict, baseline, local, remote, configured)
            tg.agreement = l4.agreement
            if l4.judged:
                judged.add("L4")
            failures += l4.failures
            ambiguous = l4.ambiguous
            self._local[ra.target] = LocalPeer(ra.model, ra.version, l4.own, now, configured)
        nb = next_baseline(ra, verdict, baseline, self.cfg)
        if nb is not None:
            problem = self.store.save(nb)
            if problem:
                notes.append(problem)
            self._baselines[bkey] = nb
            baseline = nb
        evidence = failure_evidence(ra, failures, baseline)
        self.shared.ledger.add_round(
            ra.target,
            RoundRecord(now, tuple(failures), frozenset(judged), ambiguous, ra.model, ra.version, evidence),
        )
        self._after_round(ra.target, bool(failures), tg, now)
        tg.rounds += 1
        tg.failed_rounds += bool(failures)
        tg.tie_flips += len(verdict.tie_flips)
        for f in failures:
            tg.failures_by_level[f.level] = tg.failures_by_level.get(f.level, 0) + 1
        if failures:  # every failed round is in the log, whether or not it makes an incident
            self.log.warning(
                "gates %s: round failed: %s",
                ra.target,
                "; ".join(f"{f.level} {f.check} on {f.prompt[:30]!r} -> {f.output[:40]!r}" for f in failures[:5]),
            )
        tg.last_round_mono = now
        tg.failures = tuple(failures)
        notes += [n for n in verdict.notes if n not in notes]
        self._show(ra.target, tg, notes, baseline, now)
        return Folded()

    def _show(self, target: str, tg: TargetGates, notes: list[str], baseline: Baseline | None, now: float) -> None:
        if baseline is not None:
            have = len(baseline.perplexities)
            need = self.cfg.baseline_samples
            tg.baseline = "complete" if have >= need else f"taking {have}/{need}"
        notes = [n for n in dict.fromkeys(notes) if not n.startswith("L2 baseline ")]
        for n in notes:
            if n not in tg.logged:
                self.log.warning("gates %s: %s", target, n)
        tg.logged = set(notes)  # a note that went away ends its episode
        tg.notes = tuple(notes)

    def close(self) -> None:
        pass


def make(parts: ProbeParts) -> GatesProbe | None:
    """The table's entry: the probe only when gates are enabled (its shared state, trust keys and
    fingerprint exchange are in ``parts.readings.gates``, built by the assembler)."""
    return GatesProbe(parts) if parts.cfg.gates.enabled else None

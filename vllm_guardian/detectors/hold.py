"""Does a pause or sleep the server reports still explain what the guardian sees?

The server's word (``/is_paused``, ``/is_sleeping``: vLLM's API server answers them from its
own state, so a hung engine behind it may still be "paused") is not proof. A paused or sleeping
engine is idle and holds its requests only while weights are synced. Reads the target's hold and
since when, its per-thread series and its request gauges. Decides why the hold does not explain
them (``contradiction``):

- ``spin``: the hold has lasted ``lifecycle.max_pause_spin`` seconds and a thread of the target
  has burned a core over all of them (busy_loop's test of a hot thread, its samples covering
  ``MIN_SPAN`` of that time): a weight update spins a few seconds, a paused engine none;
- ``pending``: the hold has lasted ``lifecycle.max_pause_pending`` seconds with requests pending
  in every sample of them (``MIN_SPAN`` covered): ``/pause?mode=keep`` holds requests for a sync,
  not for ever.

"The hold" is the unbroken run of them and of the resume grace after each
(``TargetState.held_since``): a pause begun within the grace of the last one, or a pause turned
sleep, continues it, so pausing and resuming every few seconds hides nothing. While either holds,
busy_loop and engine_stall judge the target as usual (``stands_down`` is False); otherwise they
stand down while it is held or in the grace after, and while drained by the operator or in the
grace after that (``TargetState.on_purpose``). No canary is sent while held (it would queue behind
the pause): a spin with nothing pending stays a suspect until the hold ends.
"""

from __future__ import annotations

from dataclasses import replace

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.hot_threads import hot_threads
from vllm_guardian.detectors.progress import pending_samples
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.vllm_versions import RETIRED
from vllm_guardian.model import Finding
from vllm_guardian.series.window import span

MIN_SPAN = 0.9  # share of a limit the samples must cover (as engine_stall's window)


def contradiction(view: TargetView, cfg: DetectorsConfig) -> str | None:
    """``spin`` or ``pending`` when the server's hold does not explain the target (above); None
    when it does, or when nothing is held."""
    st = view.state
    if st.held_since is None:
        return None
    held, life, bl = st.now - st.held_since, st.lifecycle, cfg.busy_loop
    if held >= life.max_pause_spin and hot_threads(
        view,
        cpu_ratio=bl.cpu_ratio,
        window=life.max_pause_spin,
        min_coverage=MIN_SPAN,
        max_vol_per_cpu_s=bl.max_voluntary_per_cpu_second,
        running_fraction=bl.running_fraction,
    ):
        return "spin"
    if held >= life.max_pause_pending:
        pend = pending_samples(view.series, st.target.name, st.now - life.max_pause_pending, st.now)
        covered = span(pend, st.probe_interval) >= MIN_SPAN * life.max_pause_pending
        if covered and all(v > 0 for _, v in pend):
            return "pending"
    return None


def stands_down(view: TargetView, cfg: DetectorsConfig) -> bool:
    """Whether the hang detectors judge nothing now: drained by the operator (or in the grace
    after), held by the server with nothing it does not explain, or in the grace after a hold."""
    st = view.state
    if st.drained_by_operator or st.vllm_phase == RETIRED:
        return True  # the operator's drain, or an elastic-EP rank vLLM retired on purpose
    if st.held_since is not None:  # held, or in the grace after
        return contradiction(view, cfg) is None
    return st.on_purpose


def despite_hold(view: TargetView, cfg: DetectorsConfig, finding: Finding | None) -> Finding | None:
    """``finding`` of a target judged while held (or in the grace after), saying so: ``hold``,
    ``hold_contradicted`` and ``held_s`` in its signals, what the server says and why it does not
    explain it before its summary; any other finding as it is."""
    st = view.state
    if finding is None or st.held_since is None:
        return finding
    why = contradiction(view, cfg)
    hold = st.hold or "resumed"
    signals = dict(finding.signals, hold=hold, hold_contradicted=why, held_s=round(st.now - st.held_since, 1))
    said = f"{st.hold} on purpose" if st.hold else "just resumed from a pause or sleep"
    summary = f"{said}, the server says, but {_SAYS[why or '']}: {finding.summary}"
    return replace(finding, signals=signals, summary=summary)


_SAYS = {
    "spin": "a thread burns a core all through it",
    "pending": "requests stay pending all through it",
    "": "judged",
}

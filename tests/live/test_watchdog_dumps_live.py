"""Live: vLLM's own stack dumps (``--watchdog-config``, 0.33+) go into a busy loop's evidence and the
catalog matcher reads them.

py-spy is switched off for this guardian (``evidence.pyspy`` names no program), so the only stacks the
matcher has are the simulated EngineCore's own watchdog dumps: a match proves they were fed to it. The
signature is an operator's own catalog (``diagnosis.catalogs``) for the simulator's spin: the shipped
vLLM catalog names real vLLM frames the simulator does not have.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.guardian_process import GuardianProcess, fire
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer

pytestmark = pytest.mark.live

CATALOG = textwrap.dedent(
    """
    schema: 1
    name: live-test-sim
    version: "1"
    signatures:
      - id: sim-ghost-key-spin
        title: "The simulator's ghost-key spin on the EngineCore main thread"
        kinds: [busy_loop]
        confidence: 0.9
        source: "the simulated vLLM's busy_loop fault (vllm_guardian/sim/vllm/engine.py)"
        confirmed: ["the main thread spins in _ghost_key_spin"]
        hot_thread:
          name: "^MainThread$"
          state: active
          frames:
            - {function: _ghost_key_spin, file: [vllm/engine.py]}
    """
)


def test_a_busy_loops_bundle_holds_vllms_own_stack_dumps_and_the_catalog_matches_them(tmp_path: Path):
    dump_dir = tmp_path / "dumps"
    catalog = tmp_path / "sim.yaml"
    catalog.write_text(CATALOG)
    watchdog = json.dumps({"dump_dir": str(dump_dir), "timeout": 3, "check_interval": 0.5})
    args = ("--vllm-version", "0.33.0", "--watchdog-config", watchdog)
    with SimServer(startup_delay=1.0, extra_args=args) as sim:
        sim.wait_ready(60)
        extra = {
            "policy": {"dry_run": True},
            "evidence": {"pyspy": str(tmp_path / "no-py-spy")},
            "diagnosis": {"catalogs": [str(catalog)]},
        }
        g = GuardianProcess(tmp_path, sim.port, extra=extra).start()
        try:
            assert g.wait_ready(30), g.log_text()
            for _ in range(3):
                sim.complete("warm traffic", max_tokens=2, timeout=30)
            assert list(dump_dir.glob("*.log")) == []  # a serving or idle engine never dumps
            onset = fire(sim, "busy_loop")
            inc = g.wait_incident("busy_loop", timeout=60)
            assert inc is not None, g.log_text()
            print(f"\nbusy_loop with vLLM's watchdog dumps: onset -> incident {inc['opened_at'] - onset:.1f}s")
            found = poll(lambda: next((i["evidence_dir"] for i in g.incidents() if i["evidence_dir"]), None), 60)
            assert found, g.log_text()
            bundle = Path(found)
            diagnosis = poll(lambda: (f := bundle / "diagnosis.json").exists() and json.loads(f.read_text()), 90)
            assert diagnosis, g.log_text()
            dumps = sorted(p.name for p in (bundle / "watchdog").iterdir())
            assert dumps == [f"VLLM_STACK_DUMP_for_engine_0_{sim.engine_pid()}.log"], dumps
            assert "_ghost_key_spin" in (bundle / "watchdog" / dumps[0]).read_text()
            assert not list(bundle.glob("pyspy-*.json"))  # no py-spy: the dumps are the only stacks
            assert [d["id"] for d in diagnosis["diagnosis"]][:1] == ["sim-ghost-key-spin"], diagnosis
        finally:
            assert g.stop() == 0, g.log_text()

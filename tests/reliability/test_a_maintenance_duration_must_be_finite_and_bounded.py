"""Fault 16: ``maintenance on --for`` refuses a duration that is not a finite, bounded number
with a clear usage error (exit 2), never a traceback or a maintenance that never ends."""

from __future__ import annotations

import pytest
import yaml

from vllm_guardian.cli.main import main


@pytest.mark.parametrize("text", ["inf", "1e400", "nan", "infs", "nanm", "1e12d"])
def test_a_duration_that_is_not_finite_and_bounded_is_a_usage_error(tmp_path, capsys, text):
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state")}))
    with pytest.raises(SystemExit) as info:
        main(["maintenance", "on", "--for", text, "-c", str(cfg)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "duration" in err and "Traceback" not in err
    assert not (tmp_path / "state" / "maintenance.json").exists()

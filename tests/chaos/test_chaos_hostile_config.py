"""Hostile configuration values through the real CLI: each one is refused with exit 2 and a
line naming the key (or the YAML line), promptly, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

HOSTILE = {
    "interval_huge": ("interval: 1.0e300\n", "interval:"),
    "interval_tiny": ("interval: 1.0e-9\n", "interval:"),
    "stream_maxlen": ("alerts: {stream_maxlen: 1000000000000000000000000000000}\n", "alerts.stream_maxlen:"),
    "lease_ttl": ("policy: {fleet: {lease_ttl: 1.0e30}}\n", "policy.fleet.lease_ttl:"),
    "state_dir_empty": ('state_dir: ""\n', "state_dir:"),
    "nan": ("interval: .nan\n", "interval:"),
    "deep_flow": ("a: " + "[" * 20000 + "]" * 20000 + "\n", "nested deeper"),
    "deep_block": ("".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v: 1\n", "nested deeper"),
    "alias_bomb": (
        "\n".join(
            ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
            + [f"{n}: &{n} [" + ",".join([f"*{p}"] * 10) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
        )
        + "\ntargets: *i\n",
        "aliases expand",
    ),
    "binary": ("\x00\x01\x02interval: 1\n", "g.yaml"),
    "not_utf8": (b"interval: \xff\xfe\n", "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_value_is_a_clear_error(tmp_path, name):
    text, expected = HOSTILE[name]
    assert isinstance(text, (str, bytes))
    path = tmp_path / "g.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "vllm_guardian.cli.main", "check-config", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr and "Traceback" not in out.stderr
    assert elapsed < 10, f"{name} took {elapsed:.1f}s"

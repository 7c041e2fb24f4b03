"""vLLM's --watchdog-config stack dumps: read safely from the server's dump_dir and matched against the catalog."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vllm_guardian.bundle import watchdog_dumps as wd
from vllm_guardian.diagnosis.catalog_load import load_catalogs
from vllm_guardian.diagnosis.matcher import Observation, diagnose

# A process that spins in vllm/utils/cache.py's popitem on a thread named for process_input_sockets,
# with vLLM's own watchdog dump (vllm/utils/watch_dog.py's dump_stack, verbatim in shape) once it spins.
CHILD = textwrap.dedent(
    """
    import faulthandler, os, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from vllm.utils.cache import popitem
    dump_dir = sys.argv[2]
    def process_input_sockets():
        popitem()
    threading.Thread(target=process_input_sockets, daemon=True).start()
    time.sleep(0.5)
    path = os.path.join(dump_dir, f"VLLM_STACK_DUMP_for_EngineCore_DP0_{os.getpid()}.log")
    with open(path, "a") as f:
        f.write(f"\\n>>> Call stack dump #1 at {time.ctime()} due to feed timeout\\n\\n")
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.write("\\n" + "=" * 64 + "\\n")
    print(path, flush=True)
    """
)


@pytest.fixture
def spinning_dump(tmp_path: Path) -> Path:
    pkg = tmp_path / "src" / "vllm" / "utils"
    pkg.mkdir(parents=True)
    (tmp_path / "src" / "vllm" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cache.py").write_text("def popitem():\n    n = 0\n    while True:\n        n += 1\n")
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "src"), str(dump_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.strip().startswith(str(dump_dir))
    return dump_dir


def test_a_real_watchdog_dump_of_a_busy_loop_is_collected_and_matches_the_catalog(spinning_dump: Path):
    dumps = wd.collect(str(spinning_dump), onset_wall=time.time() - 60)
    assert len(dumps) == 1 and dumps[0].name == "EngineCore_DP0"
    by_name = {t.name: t for t in dumps[0].threads}
    assert by_name["process_input_sockets"].active
    assert by_name["process_input_sockets"].frames[0].name == "popitem"
    matches = diagnose(
        [s for c in load_catalogs() for s in c.signatures], Observation(kind="busy_loop", threads=dumps[0].threads)
    )
    assert matches and matches[0].id == "vllm-mm-cache-lru-busy-loop"


def test_dumps_written_before_the_onset_are_left_out(spinning_dump: Path):
    assert wd.collect(str(spinning_dump), onset_wall=time.time() + 60) == ()


def test_a_link_the_servers_user_put_in_the_dump_dir_is_not_followed(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("root-only\n")
    (tmp_path / "VLLM_STACK_DUMP_for_EngineCore_1.log").symlink_to(secret)
    assert wd.collect(str(tmp_path), onset_wall=0) == ()


def test_a_fifo_named_like_a_dump_is_not_read(tmp_path: Path):
    os.mkfifo(tmp_path / "VLLM_STACK_DUMP_for_EngineCore_2.log")
    assert wd.collect(str(tmp_path), onset_wall=0) == ()  # no hang on open


def test_a_huge_dump_is_read_only_up_to_the_bound_from_its_end(tmp_path: Path):
    big = tmp_path / "VLLM_STACK_DUMP_for_EngineCore_3.log"
    big.write_text(
        "x" * 1_000_000
        + '\n>>> Call stack dump #9\n\nThread 0x1 (most recent call first):\n  File "a.py", line 1 in f\n'
    )
    (dump,) = wd.collect(str(tmp_path), onset_wall=0, max_bytes=4096)
    assert len(dump.text) <= 4096 and dump.threads[0].frames[0].name == "f"


def test_at_most_max_files_dumps_are_read_newest_first(tmp_path: Path):
    for pid in range(10):
        p = tmp_path / f"VLLM_STACK_DUMP_for_EngineCore_{pid}.log"
        p.write_text("")
        os.utime(p, (1000 + pid, 1000 + pid))
    dumps = wd.collect(str(tmp_path), onset_wall=0, max_files=3)
    assert [d.pid for d in dumps] == [9, 8, 7]


def test_a_missing_dump_dir_gives_no_dumps(tmp_path: Path):
    assert wd.collect(str(tmp_path / "absent"), onset_wall=0) == ()


def _target(*argv: str):
    from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target

    key = ProcKey(10, 1)
    return Target("t", key, (ProcessInfo(key, 1, Role.API_SERVER, argv),), 8000, "http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "argv, dump_dir",
    [
        (("vllm", "serve", "m", "--watchdog-config", '{"dump_dir": "/var/d", "timeout": 300}'), "/var/d"),
        (("vllm", "serve", "m", '--watchdog-config={"dump_dir": "/var/d"}'), "/var/d"),
        (("vllm", "serve", "m", "--watchdog-config.dump_dir", "/var/d"), "/var/d"),
        (("vllm", "serve", "m", "--watchdog-config", '{"timeout": 300}'), None),  # off without dump_dir (vLLM)
        (("vllm", "serve", "m", "--watchdog-config", '{"dump_dir": "rel/d"}'), None),  # the server's cwd: not guessed
        (("vllm", "serve", "m", "--watchdog-config", "{not json"), None),
        (("vllm", "serve", "m", "--watchdog-config", '["/var/d"]'), None),
        (("vllm", "serve", "m"), None),
    ],
    ids=["json", "json-equals", "dotted", "no-dump-dir", "relative", "malformed", "not-an-object", "off"],
)
def test_the_dump_dir_is_read_from_the_servers_own_watchdog_config(argv, dump_dir):
    assert wd.dump_dir_of(_target(*argv)) == dump_dir


def test_a_bundles_watchdog_dumps_are_matched_beside_py_spys_threads(spinning_dump: Path, tmp_path: Path):
    from vllm_guardian.diagnosis.service import bundle_threads

    bundle = tmp_path / "bundle"
    (bundle / wd.BUNDLE_DIR).mkdir(parents=True)
    dump = next(spinning_dump.iterdir())
    (bundle / wd.BUNDLE_DIR / dump.name).write_text(dump.read_text())
    pid = int(dump.name.rsplit("_", 1)[1].removesuffix(".log"))
    threads = bundle_threads(bundle)
    assert list(threads) == [pid]
    assert "process_input_sockets" in {t.name for t in threads[pid]}

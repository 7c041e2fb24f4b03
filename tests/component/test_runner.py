"""The command runner: argv only, timeouts kill the whole group, output is capped."""

import sys
import time

import pytest

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.runner import SubprocessRunner

PY = sys.executable


def test_exit_code_and_output_come_back():
    r = SubprocessRunner().run([PY, "-c", "import sys; print('hi'); sys.stderr.write('e'); sys.exit(3)"], 10)
    assert (r.returncode, r.text, r.error_text, r.ok) == (3, "hi\n", "e", False)


def test_a_command_past_its_timeout_is_killed_with_its_children():
    code = (
        "import subprocess,sys,time; "
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); time.sleep(60)"
    )
    t0 = time.monotonic()
    r = SubprocessRunner().run([PY, "-c", code], 1.0)
    assert r.timed_out and r.returncode is None and not r.ok
    assert time.monotonic() - t0 < 30  # communicate() returned: the grandchild holding the pipe died too


def test_output_is_capped_and_marked_truncated():
    r = SubprocessRunner().run([PY, "-c", "print('x' * 100000)"], 10, max_output=1000)
    assert len(r.stdout) == 1000 and r.truncated


def test_arguments_are_never_interpreted_by_a_shell():
    r = SubprocessRunner().run(["echo", "$(id)", ";", "ls"], 10)
    assert r.text.strip() == "$(id) ; ls"


def test_a_missing_binary_is_a_backend_unavailable_naming_it():
    with pytest.raises(BackendUnavailable, match="no-such-binary-xyz: not found"):
        SubprocessRunner().run(["no-such-binary-xyz"], 5)

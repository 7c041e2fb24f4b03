"""py-spy without running it: argv, dump parsing (JSON and text), error meaning."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.pyspy import Frame, Local, ThreadStack

# dump --json of a three-thread target (py-spy 0.4.3): a C spin, a thread blocked on a
# Lock, a pure-Python spin in the main thread. Innermost frame first.
DUMP_JSON = """[
  {"pid": 8512, "thread_id": 140569233213120, "thread_name": "native-spin", "os_thread_id": 8516,
   "active": true, "owns_gil": false,
   "frames": [
     {"name": "cuda_like_sync", "filename": "/srv/target.py", "module": null, "short_filename": "target.py",
      "line": 13, "locals": null, "is_entry": true, "is_shim_entry": false},
     {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py", "module": null,
      "short_filename": "threading.py", "line": 982, "locals": null, "is_entry": false, "is_shim_entry": false}],
   "process_info": null},
  {"pid": 8512, "thread_id": 140569241605824, "thread_name": "blocked-on-lock", "os_thread_id": 8515,
   "active": false, "owns_gil": false,
   "frames": [{"name": "wait_for_lock", "filename": "/srv/target.py", "module": null,
               "short_filename": "target.py", "line": 11, "locals": null,
               "is_entry": true, "is_shim_entry": false}],
   "process_info": null},
  {"pid": 8512, "thread_id": 140569256803200, "thread_name": "MainThread", "os_thread_id": 8512,
   "active": true, "owns_gil": true,
   "frames": [
     {"name": "busy_step", "filename": "/srv/target.py", "module": null, "short_filename": "target.py",
      "line": 6, "locals": [{"name": "n", "addr": 140569256192360, "arg": true, "repr": "7"},
                            {"name": "x", "addr": 140569242247424, "arg": false, "repr": "2710500842"}],
      "is_entry": false, "is_shim_entry": false},
     {"name": "engine_loop", "filename": "/srv/target.py", "module": null, "short_filename": "target.py",
      "line": 8, "locals": null, "is_entry": false, "is_shim_entry": false},
     {"name": "<module>", "filename": "/srv/target.py", "module": null, "short_filename": "target.py",
      "line": 20, "locals": null, "is_entry": true, "is_shim_entry": true}],
   "process_info": null}
]"""

# The same target in text mode (py-spy 0.4.3 ``dump``), with --locals on the main thread.
DUMP_TEXT = """Process 8512: /usr/bin/python3 target.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 8512 (active+gil): "MainThread"
    busy_step (target.py:6)
        Arguments:
            n: 7
        Locals:
            x: 2710500842
    engine_loop (target.py:8)
    <module> (target.py:20)
Thread 8515 (idle): "blocked-on-lock"
    wait_for_lock (target.py:11)
    Thread.run (threading.py:982)
Thread 8516 (active): "native-spin"
    spin_forever (libspin.so)
    cuda_like_sync (target.py:13)
"""

# stderr of real failures (py-spy 0.4.3, RUST_BACKTRACE set), verbatim up to the backtrace.
NO_SUCH_PID = """Error: Failed to get process executable name. Check that the process is running.

Caused by:
    0: No such file or directory (os error 2)
    1: No such file or directory (os error 2)

Stack backtrace:
   0: <E as anyhow::context::ext::StdError>::ext_context
   1: py_spy::python_process_info::PythonProcessInfo::new
"""
ROOT_WITHOUT_PTRACE = """Error: Failed to get process executable name. Check that the process is running.

Caused by:
    0: Permission denied (os error 13)
    1: Permission denied (os error 13)

Stack backtrace:
   0: <E as anyhow::context::ext::StdError>::ext_context
"""
NON_ROOT = """Permission Denied: Try running again with elevated permissions by going 'sudo env "PATH=$PATH" !!'
"""
NOT_PYTHON = """Error: Failed to find python version from target process

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
   1: py_spy::python_process_info::get_python_version
"""
STOPPED = """Error: Failed to get stack traces

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
"""
NATIVE_NONBLOCKING = "Can't get native stack traces with the --nonblocking option.\n"
NO_SAMPLES = """py-spy> Sampling process 100 times a second for 1 seconds. Press Control-C to exit.

[2026-11-30T22:53:44.637910266Z ERROR inferno::flamegraph] No stack counts found
Error: Failed to write flamegraph: No stack counts found

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
"""
UNKNOWN_FLAG = """error: unexpected argument '--json' found

Usage: py-spy dump --pid <pid>

For more information, try '--help'.
"""
PANIC = """thread 'main' (19751) panicked at src/config.rs:398:65:
invalid duration: ParseIntError { kind: InvalidDigit }
stack backtrace:
   0: __rustc::rust_begin_unwind
"""


# ---------------------------------------------------------------- argv
@pytest.mark.parametrize(
    "kw, tail",
    [
        ({}, ["--json"]),
        ({"native": True}, ["--json", "--native"]),
        ({"nonblocking": True}, ["--json", "--nonblocking"]),
        ({"nonblocking": True, "native": True}, ["--json", "--nonblocking"]),  # native needs blocking mode
        ({"with_locals": True}, ["--json", "--locals"]),
        ({"as_json": False}, []),
    ],
)
def test_dump_argv_is_one_process_never_subprocesses(kw, tail):
    assert pyspy.dump_argv("py-spy", 42, **kw) == ["py-spy", "dump", "--pid", "42", *tail]


@pytest.mark.parametrize("seconds, arg", [(0.2, 1), (1, 1), (1.5, 2), (3.0, 3)])
def test_record_takes_whole_seconds_rounded_up(seconds, arg):
    assert pyspy.record_seconds_arg(seconds) == arg


def test_record_argv_is_nonblocking_per_thread_into_the_given_file():
    assert pyspy.record_argv("/opt/py-spy", 7, 2.5, "speedscope", "/b/flame-7.speedscope.json") == [
        "/opt/py-spy",
        "record",
        "--pid",
        "7",
        "--duration",
        "3",
        "--rate",
        "100",
        "--nonblocking",
        "--threads",
        "--format",
        "speedscope",
        "--output",
        "/b/flame-7.speedscope.json",
    ]


def test_record_argv_refuses_an_unknown_format():
    with pytest.raises(ValueError, match="unknown py-spy record format"):
        pyspy.record_argv("py-spy", 7, 3, "png", "/b/x.png")


# ---------------------------------------------------------------- dump --json
def test_json_dump_gives_every_thread_with_its_state():
    threads = pyspy.parse_dump_json(DUMP_JSON)
    assert [(t.os_thread_id, t.name, t.status) for t in threads] == [
        (8516, "native-spin", "active"),
        (8515, "blocked-on-lock", "idle"),
        (8512, "MainThread", "active+gil"),
    ]
    assert {t.pid for t in threads} == {8512}


def test_json_dump_frames_are_innermost_first_with_their_labels():
    main = pyspy.parse_dump_json(DUMP_JSON)[2]
    assert [f.label for f in main.frames] == [
        "busy_step (target.py:6)",
        "engine_loop (target.py:8)",
        "<module> (target.py:20)",
    ]
    assert main.frames[0].filename == "/srv/target.py"


def test_json_dump_keeps_locals_and_arguments_apart():
    assert pyspy.parse_dump_json(DUMP_JSON)[2].frames[0].locals == (
        Local("n", "7", arg=True),
        Local("x", "2710500842", arg=False),
    )


def test_a_native_frame_has_no_line_number():
    doc = [
        {
            "pid": 1,
            "thread_id": 5,
            "thread_name": None,
            "os_thread_id": None,
            "active": True,
            "owns_gil": False,
            "frames": [
                {
                    "name": "spin_forever",
                    "filename": "/srv/libspin.so",
                    "module": "/srv/libspin.so",
                    "short_filename": "libspin.so",
                    "line": 0,
                    "locals": None,
                }
            ],
        }
    ]
    (t,) = pyspy.parse_dump_json(json.dumps(doc))
    assert (t.frames[0].label, t.frames[0].module, t.name, t.os_thread_id) == (
        "spin_forever (libspin.so)",
        "/srv/libspin.so",
        None,
        None,
    )


@pytest.mark.parametrize(
    "text, why",
    [
        ("Error: Failed to get stack traces", "not JSON"),
        ('{"pid": 1}', "expected a list"),
        ('[{"pid": 1, "thread_id": 2}]', "without frames"),
        ('[{"frames": [{"filename": "x.py"}]}]', "frame without a name"),
        ('[{"os_thread_id": "12", "frames": []}]', "expected an integer"),
        ('[{"thread_name": 3, "frames": []}]', "expected a string"),
    ],
)
def test_anything_but_a_dump_is_a_value_error(text, why):
    with pytest.raises(ValueError, match=why):
        pyspy.parse_dump_json(text)


def test_an_empty_thread_list_is_a_valid_dump():
    assert pyspy.parse_dump_json("[]") == ()


# ---------------------------------------------------------------- text mode
def test_text_dump_gives_threads_states_and_frames():
    threads = pyspy.parse_dump_text(DUMP_TEXT)
    assert [(t.os_thread_id, t.name, t.status, t.pid) for t in threads] == [
        (8512, "MainThread", "active+gil", 8512),
        (8515, "blocked-on-lock", "idle", 8512),
        (8516, "native-spin", "active", 8512),
    ]


def test_text_dump_skips_locals_and_reads_native_frames():
    threads = pyspy.parse_dump_text(DUMP_TEXT)
    assert [f.label for f in threads[0].frames] == [
        "busy_step (target.py:6)",
        "engine_loop (target.py:8)",
        "<module> (target.py:20)",
    ]
    assert threads[2].frames[0] == Frame("spin_forever", "libspin.so", 0, "libspin.so")


def test_text_dump_thread_without_os_tid_or_name():
    (t,) = pyspy.parse_dump_text("Thread 0x7F3A2B4C5700 (idle)\n    wait (threading.py:320)\n")
    assert (t.os_thread_id, t.thread_id, t.name, t.status) == (None, 0x7F3A2B4C5700, None, "idle")


@pytest.mark.parametrize("text", ["", NO_SUCH_PID, "Process 1: python\nPython v3.11.7 (/usr/bin/python3)\n"])
def test_text_without_a_thread_line_is_a_value_error(text):
    with pytest.raises(ValueError, match="no 'Thread' line"):
        pyspy.parse_dump_text(text)


def test_rendered_text_reads_back_as_the_same_stacks():
    threads = pyspy.parse_dump_json(DUMP_JSON)
    text = pyspy.render_text(threads, pid=8512, title="python target.py")
    back = pyspy.parse_dump_text(text)
    assert text.startswith('Process 8512: python target.py\n\nThread 8516 (active): "native-spin"\n')
    assert [(t.os_thread_id, t.status, [f.label for f in t.frames]) for t in back] == [
        (t.os_thread_id, t.status, [f.label for f in t.frames]) for t in threads
    ]


def test_rendered_text_shows_arguments_then_locals_like_py_spy():
    text = pyspy.render_text(pyspy.parse_dump_json(DUMP_JSON)[2:])
    assert (
        "    busy_step (target.py:6)\n        Arguments:\n            n: 7\n"
        "        Locals:\n            x: 2710500842\n    engine_loop" in text
    )


# ---------------------------------------------------------------- which thread to show
def _t(tid: int, active: bool = False, gil: bool = False, name: str | None = None) -> ThreadStack:
    return ThreadStack(tid, None, name, active, gil, ())


@pytest.mark.parametrize(
    "threads, tid, chosen",
    [
        ([_t(1, True, True), _t(2, True)], 2, 2),  # the thread the incident names wins
        ([_t(1, True), _t(2, True, True)], None, 2),  # else the one holding the GIL
        ([_t(1, True, True), _t(2)], 99, 1),  # a tid that is not in the dump: fall back to the GIL
        ([_t(1), _t(2, True)], None, 2),  # else an active one
        ([_t(1, name="worker"), _t(2, name="MainThread")], None, 2),  # else MainThread
        ([_t(1), _t(2)], None, 1),  # else the first
    ],
)
def test_pick_thread(threads, tid, chosen):
    picked = pyspy.pick_thread(threads, tid)
    assert picked is not None and picked.os_thread_id == chosen


def test_pick_thread_of_nothing_is_none():
    assert pyspy.pick_thread([], 1) is None


# ---------------------------------------------------------------- errors
def reason_of(failure: pyspy.Failure | None) -> str:
    assert failure is not None, "a failure was expected"
    return failure.reason


@pytest.mark.parametrize(
    "rc, stderr, timed_out, kind, retry",
    [
        (1, NO_SUCH_PID, False, "gone", False),
        (1, ROOT_WITHOUT_PTRACE, False, "permission", False),
        (1, NON_ROOT, False, "permission", False),
        (1, "Error: Operation not permitted (os error 1)\n", False, "permission", False),
        (1, NOT_PYTHON, False, "not_python", False),
        (1, STOPPED, False, "blocked", True),
        (1, NATIVE_NONBLOCKING, False, "usage", False),
        (1, NO_SAMPLES, False, "no_samples", False),
        (2, UNKNOWN_FLAG, False, "usage", False),
        (101, PANIC, False, "error", True),
        (None, "", True, "timeout", True),
    ],
)
def test_classify_says_what_failed_and_whether_nonblocking_may_help(rc, stderr, timed_out, kind, retry):
    failure = pyspy.classify(rc, stderr, timed_out, timeout=10)
    assert failure is not None
    assert (failure.kind, failure.retry_nonblocking) == (kind, retry)


def test_success_is_no_failure_whatever_stderr_says():
    assert pyspy.classify(0, "py-spy> Stopped sampling because process exited\n") is None


@pytest.mark.parametrize("stderr", [ROOT_WITHOUT_PTRACE, NON_ROOT])
def test_a_permission_failure_names_the_capability(stderr):
    assert "CAP_SYS_PTRACE" in reason_of(pyspy.classify(1, stderr))


def test_a_timeout_names_its_limit():
    assert reason_of(pyspy.classify(None, "", True, timeout=2.5)) == "py-spy did not answer after 2.5 s (killed)"


@pytest.mark.parametrize(
    "stderr, message",
    [
        (
            NO_SUCH_PID,
            "Failed to get process executable name. Check that the process is running. "
            "(No such file or directory (os error 2))",
        ),
        (STOPPED, "Failed to get stack traces"),
        (NO_SAMPLES, "Failed to write flamegraph: No stack counts found"),
        (PANIC, "invalid duration: ParseIntError { kind: InvalidDigit }"),
        (NATIVE_NONBLOCKING, "Can't get native stack traces with the --nonblocking option."),
        ("", ""),
    ],
)
def test_error_message_is_the_line_a_person_needs(stderr, message):
    assert pyspy.error_message(stderr) == message


def test_the_reason_never_carries_the_backtrace():
    assert "anyhow" not in reason_of(pyspy.classify(1, NO_SUCH_PID))


# ---------------------------------------------------------------- what may be written
def test_scrubbed_dump_hides_secret_locals_and_stays_json():
    doc = json.loads(DUMP_JSON)
    doc[2]["frames"][0]["locals"].append({"name": "api_key", "addr": 1, "arg": True, "repr": "'sk-live-123'"})
    doc[2]["thread_name"] = "loader --hf-token=hf_abc"
    out = json.loads(pyspy.scrub_dump_json(json.dumps(doc)))
    main = out[2]
    assert main["frames"][0]["locals"][-1]["repr"] == "<redacted>"
    assert main["frames"][0]["locals"][0]["repr"] == "7"
    assert main["thread_name"] == "loader --hf-token=<redacted>"
    assert "sk-live-123" not in json.dumps(out)


def test_scrubbing_text_that_is_not_json_still_redacts():
    assert pyspy.scrub_dump_json("oops --api-key=abc") == "oops --api-key=<redacted>"

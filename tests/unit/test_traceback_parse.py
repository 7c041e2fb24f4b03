"""The last Python traceback in a log tail, with vLLM's per-process prefixes."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.traceback_parse import parse_last_traceback, strip_line

SCHED = """\
(APIServer pid=1) INFO 12-01 05:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s
(EngineCore_DP0 pid=123) ERROR 12-01 05:00:01 [core.py:900] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=123) Traceback (most recent call last):
(EngineCore_DP0 pid=123)   File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 890, in run_engine_core
(EngineCore_DP0 pid=123)     engine_core.run_busy_loop()
(APIServer pid=1) INFO 12-01 05:00:01 [api_server.py:1] GET /health 200
(EngineCore_DP0 pid=123)   File "/venv/lib/python3.11/site-packages/vllm/v1/core/sched/scheduler.py", line 512, in schedule
(EngineCore_DP0 pid=123)     assert request.num_computed_tokens <= request.num_tokens
(EngineCore_DP0 pid=123)            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(EngineCore_DP0 pid=123) AssertionError: preempted request rescheduled twice
(APIServer pid=1) ERROR 12-01 05:00:02 [async_llm.py:1] AsyncLLM output_handler failed.
"""  # noqa: E501

CHAINED = """\
Traceback (most recent call last):
  File "/x/vllm/v1/executor/multiproc_executor.py", line 500, in get_response
    status, result = mq.dequeue(timeout=dequeue_timeout)
TimeoutError: RPC call to execute_model timed out.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/vllm/v1/engine/async_llm.py", line 600, in output_handler
    outputs = await engine_core.get_output_async()
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""

COLOURED = (
    "\x1b[1;36m(EngineCore pid=7)\x1b[0;0m Traceback (most recent call last):\n"
    '\x1b[1;36m(EngineCore pid=7)\x1b[0;0m   File "/a/b.py", line 3, in f\n'
    "\x1b[1;36m(EngineCore pid=7)\x1b[0;0m KeyError: 'k'\n"
)

TWO = (
    'Traceback (most recent call last):\n  File "/a/old.py", line 1, in old\nValueError: first\n'
    'INFO later\nTraceback (most recent call last):\n  File "/a/new.py", line 2, in new\n'
    "RuntimeError: second\n  with a second line\n"
)


@pytest.mark.parametrize(
    "text, exc, msg, proc, pid, last_fn",
    [
        (SCHED, "AssertionError", "preempted request rescheduled twice", "EngineCore_DP0", 123, "schedule"),
        (
            CHAINED,
            "vllm.v1.engine.exceptions.EngineDeadError",
            "EngineCore encountered an issue",
            None,
            None,
            "output_handler",
        ),
        (COLOURED, "KeyError", "'k'", "EngineCore", 7, "f"),
        (TWO, "RuntimeError", "second\n  with a second line", None, None, "new"),
    ],
    ids=["vllm-prefixes-interleaved", "chained", "ansi-colour", "last-of-two"],
)
def test_the_last_traceback_is_parsed(text, exc, msg, proc, pid, last_fn):
    c = parse_last_traceback(text.splitlines())
    assert c is not None
    assert c is not None
    assert (c.exception, c.process, c.pid, c.frames[-1].function) == (exc, proc, pid, last_fn)
    assert c.message.startswith(msg)


def test_interleaved_lines_of_other_processes_stay_out_of_the_frames():
    c = parse_last_traceback(SCHED.splitlines())
    assert c is not None
    assert [f.function for f in c.frames] == ["run_engine_core", "schedule"]
    assert c.frames[-1].code == "assert request.num_computed_tokens <= request.num_tokens"
    assert "GET /health" not in c.text and "^^^" not in c.text


def test_a_chain_keeps_the_cause():
    c = parse_last_traceback(CHAINED.splitlines())
    assert c is not None
    assert c.chain == ("TimeoutError: RPC call to execute_model timed out.",)


def test_a_bare_exception_line_has_an_empty_message():
    c = parse_last_traceback(
        [
            "Traceback (most recent call last):",
            '  File "/v/scheduler.py", line 9, in s',
            "    assert x",
            "AssertionError",
        ]
    )
    assert c is not None
    assert (c.exception, c.message) == ("AssertionError", "")


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["INFO all good"],
        ["Traceback (most recent call last):", '  File "/a.py", line 1, in f'],  # cut off
    ],
    ids=["empty", "no-traceback", "incomplete"],
)
def test_no_complete_traceback_is_none(lines):
    assert parse_last_traceback(lines) is None


def test_strip_line_removes_colour_and_the_prefix():
    assert strip_line("\x1b[36m(Worker_TP0 pid=55)\x1b[0m hello") == ("Worker_TP0", 55, "hello")


ENGINE_THEN_API = (
    SCHED
    + """\
(APIServer pid=1) ERROR 12-01 05:00:02 [async_llm.py:1] AsyncLLM output_handler failed.
(APIServer pid=1) Traceback (most recent call last):
(APIServer pid=1)   File "/venv/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 600, in output_handler
(APIServer pid=1)     outputs = await engine_core.get_output_async()
(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""  # noqa: E501
)


def test_the_api_servers_engine_dead_error_points_back_to_the_engines_crash():
    c = parse_last_traceback(ENGINE_THEN_API.splitlines())
    assert c is not None
    assert (c.exception, c.process) == ("AssertionError", "EngineCore_DP0")
    assert c.followed_by == (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause. (APIServer)",
    )


def test_only_a_consequence_is_still_reported():
    c = parse_last_traceback(CHAINED.splitlines())
    assert c is not None
    assert c.exception.endswith("EngineDeadError") and c.chain


RAW_AFTER_LOGGED = (
    SCHED.replace("(APIServer pid=1) ERROR 12-01 05:00:02 [async_llm.py:1] AsyncLLM output_handler failed.\n", "")
    + """\
Process EngineCore_DP0:
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/venv/lib/python3.11/site-packages/vllm/v1/core/sched/scheduler.py", line 512, in schedule
    assert request.num_computed_tokens <= request.num_tokens
AssertionError: preempted request rescheduled twice
"""
)


def test_the_logged_report_with_its_process_wins_over_the_same_crash_printed_raw():
    c = parse_last_traceback(RAW_AFTER_LOGGED.splitlines())
    assert c is not None
    assert (c.exception, c.process, c.pid) == ("AssertionError", "EngineCore_DP0", 123)
    assert c.followed_by == ()


def test_a_raw_child_traceback_is_named_by_multiprocessings_header():
    raw = RAW_AFTER_LOGGED.split("Process EngineCore_DP0:\n", 1)[1]
    c = parse_last_traceback(["INFO something", "Process EngineCore_DP0:", *raw.splitlines()])
    assert c is not None
    assert (c.exception, c.process, c.pid) == ("AssertionError", "EngineCore_DP0", None)

"""Who can change what a path names: the pure decisions behind files opened on a server's behalf
(``host.server_files``) and the state dir's check (``host.state_dir``), on literal stat values."""

from __future__ import annotations

import stat

import pytest

from vllm_guardian.host.server_files import HOLDS_ALL, HOLDS_NONE, HOLDS_OWN, entry_fixed, holds
from vllm_guardian.host.state_dir import dir_problem, entry_problem

ROOT, GUARDIAN, VLLM = 0, 990, 1001
TRUSTED = frozenset({ROOT, GUARDIAN})
DIR, FILE, LINK, SOCK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK, stat.S_IFSOCK


@pytest.mark.parametrize(
    "uid, mode, held",
    [
        (ROOT, 0o755, HOLDS_ALL),
        (GUARDIAN, 0o700, HOLDS_ALL),
        (ROOT, 0o775, HOLDS_NONE),  # its group may replace any entry (Ubuntu's /var/log: root:syslog)
        (ROOT, 0o757, HOLDS_NONE),
        (ROOT, 0o1777, HOLDS_OWN),  # /tmp: others add entries, never move root's
        (ROOT, 0o1775, HOLDS_OWN),
        (VLLM, 0o755, HOLDS_NONE),  # the server's user owns it: it changes anything in it
        (VLLM, 0o1777, HOLDS_NONE),
    ],
    ids=[
        "root-0755",
        "guardian-0700",
        "group-writable",
        "world-writable",
        "sticky",
        "sticky-group",
        "vllm",
        "vllm-sticky",
    ],
)
def test_who_can_change_a_directorys_entries(uid, mode, held):
    assert holds(uid, mode, TRUSTED) == held


@pytest.mark.parametrize(
    "dir_fixed, dir_uid, dir_mode, entry_uid, fixed",
    [
        (True, ROOT, 0o755, VLLM, True),  # /home/vllm itself: root placed it, vllm cannot move it
        (True, ROOT, 0o1777, ROOT, True),  # root's entry in /tmp
        (True, ROOT, 0o1777, VLLM, False),  # vllm's entry in /tmp
        (True, VLLM, 0o755, ROOT, False),  # anything in vllm's directory
        (True, ROOT, 0o775, ROOT, False),
        (False, ROOT, 0o755, ROOT, False),  # a fixed directory reached through a loose one
    ],
    ids=["root-dir", "sticky-root-entry", "sticky-vllm-entry", "in-vllm-dir", "group-writable", "loose-above"],
)
def test_whether_an_entry_stays_what_it_is(dir_fixed, dir_uid, dir_mode, entry_uid, fixed):
    assert entry_fixed(dir_fixed, dir_uid, dir_mode, entry_uid, TRUSTED) is fixed


@pytest.mark.parametrize(
    "uid, mode, problem",
    [
        (GUARDIAN, DIR | 0o750, ""),
        (GUARDIAN, DIR | 0o700, ""),
        (VLLM, DIR | 0o777, "is not owned by the guardian's user (uid 990)"),  # the audit's case
        (ROOT, DIR | 0o750, "is not owned by the guardian's user (uid 990)"),  # root's; the guardian is 990
        (GUARDIAN, DIR | 0o770, "is writable by group or others"),
        (GUARDIAN, DIR | 0o1777, "is writable by group or others"),
        (GUARDIAN, FILE | 0o640, "not a directory"),
    ],
    ids=["own-0750", "own-0700", "another-users", "roots", "group-writable", "sticky", "a-file"],
)
def test_a_state_dir_is_the_guardians_own_or_says_why_not(uid, mode, problem):
    got = dir_problem(uid, mode, GUARDIAN)
    assert (problem in got) if problem else got == ""


@pytest.mark.parametrize(
    "uid, mode, problem",
    [
        (GUARDIAN, FILE | 0o640, ""),
        (ROOT, FILE | 0o644, ""),  # written by `guardian maintenance on` run as root
        (GUARDIAN, DIR | 0o750, ""),
        (GUARDIAN, SOCK | 0o660, ""),  # the control socket, for its group
        (ROOT, LINK | 0o777, ""),
        (VLLM, FILE | 0o600, "owned by uid 1001"),  # maintenance.json another user left
        (VLLM, LINK | 0o777, "owned by uid 1001"),
        (GUARDIAN, FILE | 0o666, "writable by group or others (mode 0666)"),
        (GUARDIAN, DIR | 0o777, "writable by group or others (mode 0777)"),
    ],
    ids=["file", "roots-file", "dir", "socket", "roots-link", "strangers-file", "strangers-link", "0666", "0777"],
)
def test_an_entry_below_the_state_dir_no_one_else_can_change(uid, mode, problem):
    got = entry_problem(uid, mode, TRUSTED)
    assert (problem in got) if problem else got == ""

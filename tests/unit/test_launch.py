"""restart.mode command: the launch is built from the config alone (clean environment, user and
groups), and what would make it fail is said before anything is stopped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_guardian.host.launch import (
    MINIMAL_PATH,
    Accounts,
    LaunchError,
    LaunchSpec,
    build_launch_spec,
    preflight,
)
from vllm_guardian.config.loader import parse_config

USERS = {"vllm": SimpleNamespace(pw_name="vllm", pw_uid=1001, pw_gid=1001, pw_dir="/srv/vllm")}
GROUPS = {"video": SimpleNamespace(gr_gid=44), "vllm": SimpleNamespace(gr_gid=1001)}


def _lookup(table, key_attr):
    def by_id(i):
        for v in table.values():
            if getattr(v, key_attr) == i:
                return v
        raise KeyError(i)

    return by_id


ACCOUNTS = Accounts(
    user_by_name=lambda n: USERS[n],
    user_by_id=_lookup(USERS, "pw_uid"),
    group_by_name=lambda n: GROUPS[n],
    group_by_id=_lookup(GROUPS, "gr_gid"),
    grouplist=lambda name, gid: [gid, 44],
)


def restart(**kw):
    cfg = parse_config(
        {
            "targets": [
                {
                    "name": "t",
                    "match": {"port": 8000},
                    "restart": {"mode": "command", "command": ["vllm", "serve", "m"], **kw},
                }
            ]
        }
    )
    return cfg.targets[0].restart


def test_the_environment_is_the_config_over_a_minimal_base_and_nothing_of_the_guardians(monkeypatch):
    monkeypatch.setenv("REDIS_PASSWORD", "guardian-secret")
    monkeypatch.setenv("GUARDIAN_API_KEY", "sk-guardian")
    spec = build_launch_spec(restart(env={"VLLM_LOGGING_LEVEL": "INFO", "LANG": "en_US.UTF-8"}), ACCOUNTS)
    assert dict(spec.env) == {"PATH": MINIMAL_PATH, "LANG": "en_US.UTF-8", "HOME": "/", "VLLM_LOGGING_LEVEL": "INFO"}


def test_a_user_brings_its_home_its_primary_group_and_its_supplementary_groups():
    spec = build_launch_spec(restart(user="vllm"), ACCOUNTS)
    assert (spec.uid, spec.gid, spec.groups) == (1001, 1001, (44, 1001))
    assert (spec.env["HOME"], spec.env["USER"], spec.env["LOGNAME"]) == ("/srv/vllm", "vllm", "vllm")


@pytest.mark.parametrize(
    "kw, uid, gid, groups",
    [
        ({"user": "1001"}, 1001, 1001, (44, 1001)),
        ({"user": "vllm", "group": "video"}, 1001, 44, (44, 1001)),
        ({"group": "44"}, None, 44, ()),
        ({}, None, None, None),
    ],
)
def test_user_and_group_by_name_or_number(kw, uid, gid, groups):
    spec = build_launch_spec(restart(**kw), ACCOUNTS)
    assert (spec.uid, spec.gid, spec.groups) == (uid, gid, groups)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"user": "nobody-here"}, "restart.user: no user 'nobody-here' on this host"),
        ({"group": "nogroup-here"}, "restart.group: no group 'nogroup-here' on this host"),
    ],
)
def test_an_unknown_user_or_group_is_a_clear_error(kw, message):
    with pytest.raises(LaunchError, match=message):
        build_launch_spec(restart(**kw), ACCOUNTS)


def test_user_and_group_are_validated_as_strings_in_the_config():
    assert restart(user="vllm", group="video").user == "vllm"


# ---------------------------------------------------------------- preflight
def spec(**kw: Any) -> LaunchSpec:
    base: dict[str, Any] = dict(argv=("vllm", "serve"), env={"PATH": "/opt/vllm/bin"}, cwd=None, log_file=None)
    base.update(kw)
    return LaunchSpec(**base)


def test_a_launch_that_can_run_has_no_problem(tmp_path):
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    s = spec(env={"PATH": str(tmp_path)}, cwd=str(tmp_path), log_file=str(tmp_path / "vllm.log"))
    assert preflight(s) == []


def test_a_read_only_log_path_says_to_allow_it_in_the_unit():
    problems = preflight(
        spec(log_file="/var/log/vllm/x.log"),
        can_append=lambda p: "Read-only file system",
        which=lambda *a, **k: "/bin/x",
    )
    assert problems == [
        "restart.log_file /var/log/vllm/x.log: cannot append: Read-only file system (under the "
        "guardian's systemd unit only ReadWritePaths= are writable: add the log directory there, "
        "see deploy/systemd/guardian.service)"
    ]


def test_a_real_unwritable_log_file_is_caught(tmp_path):
    problems = preflight(spec(argv=("/bin/sh",), log_file=str(tmp_path / "missing-dir" / "x.log")))
    assert problems == [f"restart.log_file {tmp_path}/missing-dir/x.log: cannot append: No such file or directory"]


@pytest.mark.parametrize(
    "s, problem",
    [
        (spec(cwd="/nonexistent-dir"), "restart.cwd /nonexistent-dir: not a directory"),
        (
            spec(),
            "restart.command: vllm is not on the launch PATH (/opt/vllm/bin); give its full path or set "
            "restart.env.PATH",
        ),
        (spec(argv=("/opt/none/python",)), "restart.command: /opt/none/python is not an executable file"),
    ],
)
def test_what_would_fail_is_named(s, problem):
    assert problem in preflight(s)

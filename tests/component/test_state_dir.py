"""The state dir is the guardian's own or ``guardian run`` does not start: real directories, real
owners and modes, another user's files (``nobody``) where the audit found them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from vllm_guardian.errors import CannotStart
from vllm_guardian.host.state_dir import check_state_dir
from tests.support.other_user import NOBODY, as_nobody, needs_root, users_dir, world_dir

pytestmark = needs_root


@pytest.fixture
def world():
    with world_dir() as d:
        yield d


def state(parent: Path, mode: int = 0o750, uid: int = 0) -> Path:
    d = parent / "state"
    d.mkdir()
    os.chown(d, uid, uid)
    d.chmod(mode)
    return d


def nobodys_dir_0777(world: Path) -> Path:
    """The audit's case: another user made the state dir, mode 0777."""
    return state(world, 0o777, NOBODY)


def roots_dir_0777(world: Path) -> Path:
    return state(world, 0o777)


def below_nobodys_dir(world: Path) -> Path:
    return state(users_dir(world, "opt"))


def below_a_group_writable_dir(world: Path) -> Path:
    (world / "var").mkdir()
    (world / "var").chmod(0o775)
    return state(world / "var")


def holding_nobodys_maintenance_switch(world: Path) -> Path:
    d = state(world)
    switch = d / "maintenance.json"
    switch.write_text(json.dumps({"until": time.time() + 365 * 86400}))
    os.chown(switch, NOBODY, NOBODY)
    return d


def holding_a_world_writable_incident(world: Path) -> Path:
    d = state(world)
    inc = d / "incidents" / "01HF7Z9GDG0TRA5GW6MSKGM001"
    inc.mkdir(parents=True)
    (inc / "incident.json").write_text("{}")
    (inc / "incident.json").chmod(0o666)
    return d


def a_link_nobody_made(world: Path) -> Path:
    real = state(world)
    as_nobody("ln", "-s", str(real), str(users_dir(world) / "state"))
    return world / "vllm" / "state"


REFUSED = {
    "nobodys-0777": (nobodys_dir_0777, ["(owner uid 65534 (nobody), mode 0777) is not owned by the guardian's"]),
    "roots-0777": (roots_dir_0777, ["(owner uid 0 (root), mode 0777) is writable by group or others"]),
    "below-nobodys-dir": (below_nobodys_dir, ["/opt (owner uid 65534, mode 0755) above it"]),
    "below-a-group-writable-dir": (below_a_group_writable_dir, ["/var (owner uid 0, mode 0775) above it"]),
    "nobodys-maintenance-switch": (holding_nobodys_maintenance_switch, ["maintenance.json is owned by uid 65534"]),
    "world-writable-incident": (holding_a_world_writable_incident, ["incident.json is writable by group or others"]),
    "link-by-nobody": (a_link_nobody_made, ["a symbolic link (owner uid 65534"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_state_dir_someone_else_can_change_is_refused_naming_path_owner_and_mode(world, case):
    make, words = REFUSED[case]
    path = make(world)
    with pytest.raises(CannotStart) as e:
        check_state_dir(str(path))
    msg = str(e.value)
    assert msg.startswith(f"state_dir {path}")
    for word in words:
        assert word in msg, msg


def test_the_guardians_own_state_dir_is_used(world):
    d = state(world)
    (d / "incidents").mkdir(mode=0o750)
    (d / "maintenance.json").write_text("{}")
    check_state_dir(str(d))


def test_a_state_dir_in_a_sticky_directory_is_used(world):
    tmp = world / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    check_state_dir(str(state(tmp)))


def test_roots_link_to_the_state_dir_is_followed(world):
    (world / "guardian").symlink_to(state(world))
    check_state_dir(str(world / "guardian"))

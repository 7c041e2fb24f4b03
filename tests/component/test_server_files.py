"""Files opened on a server's behalf, on real files with a real other user (``nobody``): what that
user can point a path at is refused before a byte is read or written, whichever setting names
the path; what only root can change is followed (a Kubernetes Secret's links, /var/run); refusals
are counted per setting and each path is said once."""

from __future__ import annotations

import logging
import subprocess
import sys
import os
import threading
from pathlib import Path

import pytest

from vllm_guardian.config.schema import MatchConfig, TargetConfig
from vllm_guardian.diagnosis.log_tail import LogSource, read_tail
from vllm_guardian.discovery.scan import discover, pid_file_reader, read_pid_file
from vllm_guardian.host.api_keys import read_key_file, resolve_key
from vllm_guardian.host.launch import build_launch_spec
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.server_files import ServerFiles, UnsafePath, open_append, open_read, read_head
from vllm_guardian.config.loader import parse_config
from vllm_guardian.surface.exporter import GuardianCollector
from vllm_guardian.surface.status_render import render_status
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.testing.fake_proc import FakeProcTree
from tests.support.daemon_world import World
from tests.support.other_user import (
    NOBODY,
    SECRET,
    as_nobody,
    needs_root,
    root_only,
    snapshot,
    users_dir,
    world_dir,
)

pytestmark = needs_root


@pytest.fixture
def world():
    with world_dir() as d:
        yield d


def opened_off_thread(fn, timeout: float = 5.0):
    """``fn()``'s result or exception, failing the test when it blocks."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except OSError as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the open blocked"
    return out


# ---------------------------------------------------------------- what the server's user can do
def link_to_secret(world: Path, secret_dir: Path) -> Path:
    logs = users_dir(world)
    as_nobody("ln", "-s", str(root_only(secret_dir)), str(logs / "server.log"))
    return logs / "server.log"


def link_on_the_way(world: Path, secret_dir: Path) -> Path:
    logs = users_dir(world)
    root_only(secret_dir, "server.log")
    as_nobody("ln", "-s", str(secret_dir), str(logs / "current"))
    return logs / "current" / "server.log"


def hard_link(world: Path, secret_dir: Path) -> Path:
    # fs.protected_hardlinks=1 stops nobody making it here; a host with it off lets it, so root
    # makes the very same link in nobody's directory
    logs = users_dir(world)
    os.link(root_only(secret_dir), logs / "server.log")
    return logs / "server.log"


def fifo(world: Path, secret_dir: Path) -> Path:
    logs = users_dir(world)
    as_nobody("mkfifo", str(logs / "server.log"))
    return logs / "server.log"


def link_in_sticky_dir(world: Path, secret_dir: Path) -> Path:
    tmp = world / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    as_nobody("ln", "-s", str(root_only(secret_dir)), str(tmp / "server.log"))
    return tmp / "server.log"


HOSTILE = {
    "link-to-a-root-only-file": (link_to_secret, "a symbolic link (owner uid 65534"),
    "link-on-the-way": (link_on_the_way, "its component 'current' is a symbolic link"),
    "link-in-a-sticky-dir": (link_in_sticky_dir, "a symbolic link (owner uid 65534"),
    "hard-link": (hard_link, "has 2 hard links"),
    "fifo": (fifo, "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_path_the_servers_user_controls_is_read_only_as_what_it_is(world, tmp_path, case):
    make, why = HOSTILE[case]
    path = make(world, tmp_path)
    out = opened_off_thread(lambda: read_head(str(path), 4096))
    assert "value" not in out, out
    assert isinstance(out["error"], UnsafePath) and why in str(out["error"])


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_path_the_servers_user_controls_is_never_written_through(world, tmp_path, case):
    make, why = HOSTILE[case]
    path = make(world, tmp_path)
    secrets = {p: snapshot(p) for p in tmp_path.iterdir()}
    out = opened_off_thread(lambda: open_append(str(path), (NOBODY, NOBODY)))
    assert "value" not in out, out
    assert isinstance(out["error"], UnsafePath) and why in str(out["error"])
    assert {p: snapshot(p) for p in tmp_path.iterdir()} == secrets


# ---------------------------------------------------------------- every setting that names a file
def preflight_of(path: str) -> str:
    cfg = parse_config(
        {
            "targets": [
                {
                    "name": "t",
                    "match": {"port": 8000},
                    "restart": {"mode": "command", "command": ["/bin/true"], "user": "nobody", "log_file": path},
                }
            ]
        }
    )
    return "; ".join(OsProcessControl(ProcFS()).preflight(build_launch_spec(cfg.targets[0].restart)))


def log_tail_of(path: str) -> str:
    tail = read_tail(LogSource("file", path, setting="log_path"))
    assert tail.lines == ()
    return tail.error or ""


def pid_file_of(path: str) -> str:
    try:
        return read_pid_file(path)
    except OSError as e:
        return str(e)


def api_key_of(path: str) -> str:
    target = TargetConfig(name="t", match=MatchConfig(port=8000), api_key_file=path)
    src = resolve_key(target, 42, (), FakeProcTree(Path("/nonexistent")).procfs(), environ={})
    assert src.key is None
    return src.problem


@pytest.mark.parametrize(
    "read",
    [preflight_of, log_tail_of, pid_file_of, api_key_of],
    ids=["restart.log_file", "log_path", "match.pid_file", "api_key_file"],
)
def test_every_setting_that_names_a_file_refuses_a_link_its_user_made(world, tmp_path, read):
    answer = read(str(link_to_secret(world, tmp_path)))
    assert "symbolic link" in answer
    assert "guardian-test-secret" not in answer


def test_a_pid_file_linked_to_another_services_pid_file_names_no_target(world, tmp_path):
    """The server's user points its pid file at a root-owned one naming a root process (pid 1
    here; sshd's would do): read as before, discovery took pid 1 for the server."""
    service = tmp_path / "sshd.pid"
    service.write_text("1\n")
    pids = users_dir(world)
    as_nobody("ln", "-s", str(service), str(pids / "vllm.pid"))
    cfg = parse_config(
        {"autodiscover": False, "targets": [{"name": "llm", "match": {"pid_file": str(pids / "vllm.pid")}}]}
    )
    files = ServerFiles()
    result = discover(ProcFS(), cfg, read_file=pid_file_reader(files))
    assert result.targets == ()
    assert "symbolic link" in dict(result.unmatched)["llm"]
    assert files.status_section().refused == {"match.pid_file": 1}


# ---------------------------------------------------------------- what is followed
def test_a_kubernetes_secrets_own_links_are_followed(world):
    """kubelet's layout: a sticky tmpfs root, ``key -> ..data/key``, ``..data -> ..<timestamp>``, all root's."""
    vol = world / "secret"
    vol.mkdir()
    vol.chmod(0o1777)
    (vol / "..2024_01_01").mkdir()
    (vol / "..2024_01_01" / "key").write_text("sk-from-a-secret\n")
    (vol / "..data").symlink_to("..2024_01_01")
    (vol / "key").symlink_to("..data/key")
    assert read_key_file(str(vol / "key")) == "sk-from-a-secret"


def test_roots_links_on_the_way_are_followed(world):
    (world / "real").mkdir()
    (world / "real" / "server.log").write_text("line\n")
    (world / "logs").symlink_to("real")
    assert read_head(str(world / "logs" / ".." / "logs" / "server.log"), 100) == b"line\n"


def test_the_servers_own_file_in_its_own_directory_is_read(world):
    logs = users_dir(world)
    as_nobody("sh", "-c", f"echo 'Traceback (most recent call last):' > {logs / 'server.log'}")
    assert read_head(str(logs / "server.log"), 100) == b"Traceback (most recent call last):\n"


def test_an_existing_log_of_a_third_user_is_not_appended_to(world):
    logs = world / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("someone else's\n")
    os.chown(logs / "server.log", 4242, 4242)
    with pytest.raises(UnsafePath, match="owned by uid 4242"):
        open_append(str(logs / "server.log"), (NOBODY, NOBODY))


# ---------------------------------------------------------------- counted, said once
def test_each_refusal_is_counted_under_its_setting_and_each_path_said_once(world, tmp_path, caplog):
    path = str(link_to_secret(world, tmp_path))
    files = ServerFiles(logging.getLogger("test-files"))
    with caplog.at_level(logging.WARNING, "test-files"):
        for _ in range(3):
            with pytest.raises(UnsafePath):
                files.reader("log_path")(path)
        with pytest.raises(UnsafePath):
            files.open_append("restart.log_file", path, (NOBODY, NOBODY))
    section = files.status_section()
    assert section.refused == {"log_path": 3, "restart.log_file": 1}
    assert section.last_refusal.startswith(f"restart.log_file {path}: a symbolic link")
    assert [r.getMessage().split(" refused")[0] for r in caplog.records] == ["log_path", "restart.log_file"]
    assert all(SECRET.strip() not in r.getMessage() for r in caplog.records)


def test_a_refused_fd_is_never_left_open(world, tmp_path):
    path = str(link_on_the_way(world, tmp_path))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        with pytest.raises(UnsafePath):
            open_read(path)
    assert len(os.listdir("/proc/self/fd")) == before


def test_without_cap_chown_a_created_log_stays_the_guardians_and_opens(world):
    """The shipped systemd unit grants no CAP_CHOWN: the log is created, kept root's, and opened."""
    log = world / "server.log"
    code = f"from vllm_guardian.host.server_files import open_append; open_append({str(log)!r}, ({NOBODY}, {NOBODY}))"
    subprocess.run(["setpriv", "--bounding-set", "-chown", sys.executable, "-c", code], check=True, timeout=60)
    assert (log.stat().st_uid, log.stat().st_gid) == (0, 0)


def test_the_daemon_counts_a_refusal_in_its_status_table_and_metrics(world, tmp_path):
    """Wired as ``guardian run`` wires it: discovery reads the pid file through the seams' opener."""
    service = tmp_path / "sshd.pid"
    service.write_text("1\n")
    pids = users_dir(world)
    as_nobody("ln", "-s", str(service), str(pids / "vllm.pid"))
    w = World(
        tmp_path, {"autodiscover": False, "targets": [{"name": "llm", "match": {"pid_file": str(pids / "vllm.pid")}}]}
    )
    try:
        w.step(3)
        snapshot = w.d.status()
    finally:
        w.d.runner.shutdown()
    doc = snapshot.to_dict()
    (n,) = doc["server_files"]["refused"].values()  # one per discovery pass
    assert doc["server_files"]["refused"] == {"match.pid_file": n} and n >= 1
    assert "symbolic link" in doc["unmatched"][0]["reason"]
    table = render_status(StatusSnapshot.from_dict(doc))
    assert f"FILES REFUSED on a server's behalf: match.pid_file {n}" in table
    fams = {f.name: f for f in GuardianCollector(lambda: snapshot).collect()}
    assert [(s.labels, s.value) for s in fams["guardian_server_files_refused"].samples] == [
        ({"setting": "match.pid_file"}, n)
    ]

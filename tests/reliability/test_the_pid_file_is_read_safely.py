"""Fault 14: the pid file is read safely: regular files only, without blocking, a few bytes,
and only from a file that no one but its owner (root, the guardian's user, or the owner of the
process it names) could have written."""

from __future__ import annotations

import os
import threading

import pytest

from vllm_guardian.discovery.scan import read_pid_file


def read_off_thread(path: str, timeout: float = 5.0):
    out: dict = {}

    def run():
        try:
            out["text"] = read_pid_file(path)
        except OSError as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "reading the pid file blocked"
    return out


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "vllm.pid"
    os.mkfifo(fifo)
    out = read_off_thread(str(fifo))
    assert "not a regular file" in str(out["error"])


def test_a_device_is_refused(tmp_path):
    out = read_off_thread("/dev/zero")
    assert "not a regular file" in str(out["error"])


def test_only_a_few_bytes_are_read(tmp_path):
    big = tmp_path / "vllm.pid"
    big.write_text("123\n" + "x" * 10_000_000)
    assert len(read_pid_file(str(big))) <= 64


def test_a_world_writable_pid_file_is_refused(tmp_path):
    f = tmp_path / "vllm.pid"
    f.write_text(f"{os.getpid()}\n")
    os.chmod(f, 0o666)
    with pytest.raises(OSError, match="writable by others"):
        read_pid_file(str(f))


def test_a_file_owned_by_a_stranger_naming_someone_elses_process_is_refused(tmp_path):
    f = tmp_path / "vllm.pid"
    f.write_text("1\n")  # pid 1 is root's; the file is owned by nobody
    os.chown(f, 65534, 65534)
    with pytest.raises(OSError, match="owned by uid 65534"):
        read_pid_file(str(f))


def test_a_regular_pid_file_of_the_guardians_user_is_read(tmp_path):
    f = tmp_path / "vllm.pid"
    f.write_text(f"{os.getpid()}\n")
    os.chmod(f, 0o644)
    assert read_pid_file(str(f)).strip() == str(os.getpid())

"""Reading which pod, container and unit a process lives in, from the cgroup shapes of the field."""

from __future__ import annotations

import pytest

from vllm_guardian.host.cgroup import (
    CgroupPlace,
    container_id_of,
    parse_cgroup_procs,
    parse_proc_cgroup,
    parse_systemctl_show,
)

UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
CID = "4f1c0e9a" * 8  # 64 hex


@pytest.mark.parametrize(
    "text, pod, container",
    [
        # cgroup v2, kubelet systemd driver, containerd
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
            UID,
            CID,
        ),
        # cgroup v2, systemd driver, CRI-O; a guaranteed-QoS pod (no QoS slice)
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", UID, CID),
        # cgroup v2, systemd driver, docker (cri-dockerd)
        (
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
            f"docker-{CID}.scope\n",
            UID,
            CID,
        ),
        # cgroup v2, cgroupfs driver
        (f"0::/kubepods/burstable/pod{UID}/{CID}\n", UID, CID),
        # cgroup v1, cgroupfs driver: one line per hierarchy
        (
            f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
            f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n",
            UID,
            CID,
        ),
        # the pod's own cgroup (no container yet)
        (f"0::/kubepods/burstable/pod{UID}\n", UID, None),
        # a systemd service, a login session, a container outside Kubernetes
        ("0::/system.slice/vllm@llama.service\n", None, None),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),
        (f"0::/system.slice/docker-{CID}.scope\n", None, CID),
        ("", None, None),
    ],
)
def test_pod_uid_and_container_id_from_proc_cgroup(text, pod, container):
    place = parse_proc_cgroup(text)
    assert (place.pod_uid, place.container_id) == (pod, container)


def test_v2_path_comes_first_then_the_systemd_hierarchy():
    place = parse_proc_cgroup("5:memory:/a\n1:name=systemd:/system.slice/x.service\n0::/system.slice/x.service\n")
    assert place.paths == ("/system.slice/x.service", "/a")


@pytest.mark.parametrize(
    "paths, cgroup, inside",
    [
        (("/system.slice/vllm.service",), "/system.slice/vllm.service", True),
        (("/system.slice/vllm.service/worker",), "/system.slice/vllm.service", True),
        (("/system.slice/vllm.service2",), "/system.slice/vllm.service", False),
        (("/system.slice",), "/system.slice/vllm.service", False),
    ],
)
def test_within_means_the_cgroup_or_below_never_a_name_prefix(paths, cgroup, inside):
    assert CgroupPlace(paths).within(cgroup) is inside


@pytest.mark.parametrize(
    "runtime_id, expected",
    [
        (f"containerd://{CID}", CID),
        (f"cri-o://{CID}", CID),
        (f"docker://{CID}", CID),
        ("containerd://short", None),
        ("", None),
        (CID, None),
    ],
)
def test_container_id_from_a_pod_status(runtime_id, expected):
    assert container_id_of(runtime_id) == expected


@pytest.mark.parametrize(
    "text, cgroup, pid",
    [
        ("ControlGroup=/system.slice/vllm@llama.service\nMainPID=4242\n", "/system.slice/vllm@llama.service", 4242),
        ("MainPID=0\nControlGroup=\n", None, None),  # an inactive unit
        ("ControlGroup=/system.slice/x.service\nMainPID=0\n", "/system.slice/x.service", None),
        ("garbage", None, None),
    ],
)
def test_systemctl_show(text, cgroup, pid):
    u = parse_systemctl_show(text)
    assert (u.control_group, u.main_pid) == (cgroup, pid)


def test_cgroup_procs_lists_one_pid_a_line():
    assert parse_cgroup_procs("12\n345\n\n") == [12, 345]

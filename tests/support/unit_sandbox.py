"""Run a command under the sandbox of ``deploy/systemd/guardian.service``, without systemd.

This machine has no systemd as PID 1 (``systemd-run`` cannot start a unit), but root here may
make a mount namespace, mount a proc with ``hidepid``, set capability sets and load a seccomp
filter — what systemd itself does for the unit. Every setting is read from the unit file, so the
sandbox follows the unit when it changes:

- ``ProtectSystem=strict`` + ``ReadWritePaths=``/``StateDirectory=``: every mount read-only but
  /proc, /sys, /dev and the writable paths (the unit's own, plus the caller's: a test's files);
- ``ProtectHome=read-only``: /home, /root and /run/user read-only (already so under strict);
- ``ProtectProc=ptraceable``: a proc mounted with ``hidepid=ptraceable`` over /proc;
- ``UMask=``;
- ``CapabilityBoundingSet=``/``AmbientCapabilities=``/``NoNewPrivileges=`` (``setpriv``);
- ``SystemCallFilter=`` (each group expanded by ``systemd-analyze syscall-filter``; an allow list
  also allows ``@default``, as systemd does), ``SystemCallErrorNumber=``,
  ``RestrictAddressFamilies=`` and ``SystemCallArchitectures=native`` (libseccomp's default for
  other architectures is to kill): one seccomp filter loaded through libseccomp.

``NOT_EMULATED`` lists what it does not do, with the reason; the live test prints it.

Run as: ``python -m tests.support.unit_sandbox UNIT WRITABLE[:WRITABLE…] -- CMD…`` (stage one, in
a new mount namespace made by ``unshare -m``: mounts, umask, then ``setpriv`` into stage two,
which loads the filter and execs CMD). ``prefix(unit, writable)`` builds that argv prefix.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

NOT_EMULATED = {
    "PrivateDevices/DeviceAllow/BindPaths": "no accelerator on this machine, and no device cgroup of our own",
    "PrivateTmp": "the test shares its files with the guardian under /tmp (its folder is a writable path)",
    "PrivateMounts": "a private mount namespace is made, but mount propagation is not checked",
    "ProtectKernelTunables/Modules/ControlGroups/Clock/Hostname": "covered by the missing capabilities",
    "RestrictNamespaces/RestrictRealtime/RestrictSUIDSGID/LockPersonality": "not loaded into the filter",
    "WatchdogSec/Type=notify/NotifyAccess": "no systemd to notify (tests/component cover sd_notify)",
    "Nice/CPUWeight/LimitNOFILE": "scheduling and limits, not privilege",
}

MODULE = "tests.support.unit_sandbox"
_AF = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}


@dataclass(frozen=True)
class UnitSandbox:
    """The unit's sandbox settings, as lists of values (a key may be repeated)."""

    values: dict[str, tuple[str, ...]]

    @classmethod
    def read(cls, unit: Path) -> UnitSandbox:
        values: dict[str, list[str]] = {}
        section = ""
        for line in unit.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                values.setdefault(key, []).append(value)
        return cls({k: tuple(v) for k, v in values.items()})

    def one(self, key: str, default: str = "") -> str:
        return self.values.get(key, (default,))[-1]

    def words(self, key: str) -> list[str]:
        return [w for v in self.values.get(key, ()) for w in v.split()]

    def writable(self) -> list[str]:
        state = [f"/var/lib/{d}" for d in self.words("StateDirectory")]
        return list(dict.fromkeys([p.lstrip("-") for p in self.words("ReadWritePaths")] + state))

    def capabilities(self) -> list[str]:
        return [c.lower().removeprefix("cap_") for c in self.words("CapabilityBoundingSet")]

    def address_families(self) -> list[int]:
        return [_AF[f] for f in self.words("RestrictAddressFamilies")]

    def syscalls(self) -> set[str]:
        """The names the filter allows (an allow list first, then ~ lines removing)."""
        lines = self.values.get("SystemCallFilter", ())
        assert lines and not lines[0].startswith("~"), "an allow list first is what this sandbox emulates"
        allowed = expand("@default")
        for line in lines:
            names = set().union(*(expand(w) for w in line.removeprefix("~").split()))
            allowed = allowed - names if line.startswith("~") else allowed | names
        return allowed


@cache
def _groups() -> dict[str, list[str]]:
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True, text=True).stdout
    groups: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        if m := re.match(r"^(@[\w-]+)", line):
            current = m.group(1)
            groups[current] = []
        elif current and (w := line.strip()) and not w.startswith("#"):
            groups[current].append(w)
    return groups


def expand(word: str) -> set[str]:
    """A system call name, or a group's members, groups within it expanded."""
    if not word.startswith("@"):
        return {word}
    return set().union(*(expand(m) for m in _groups()[word]))


# ---------------------------------------------------------------- stage one: mounts, umask, setpriv
def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line.split()[4].replace("\\040", " ") for line in f]


def stage_one(unit: Path, extra_writable: list[str], cmd: list[str]) -> None:
    box = UnitSandbox.read(unit)
    _mount("--make-rprivate", "/")
    api = ("/proc", "/sys", "/dev")
    writable = [p for p in box.writable() + extra_writable if os.path.isdir(p)]
    for p in writable:
        _mount("--bind", p, p)  # its own mount, so that remounting / read-only leaves it writable
    if box.one("ProtectSystem") == "strict" or box.one("ProtectHome") == "read-only":
        for mp in _mount_points():
            if mp in writable or any(mp == a or mp.startswith(a + "/") for a in api):
                continue
            strict = box.one("ProtectSystem") == "strict"
            home = any(mp == h or mp.startswith(h + "/") for h in ("/home", "/root", "/run/user"))
            if strict or home:
                subprocess.run(["mount", "-o", "remount,bind,ro", mp], check=False)
    if (hidepid := box.one("ProtectProc", "default")) != "default":
        _mount("-t", "proc", "-o", f"hidepid={hidepid}", "proc", "/proc")
    os.umask(int(box.one("UMask", "0022"), 8))
    caps = ",".join(f"+{c}" for c in box.capabilities())
    setpriv = [shutil.which("setpriv") or "setpriv", f"--bounding-set=-all,{caps}", f"--inh-caps=-all,{caps}"]
    setpriv += [f"--ambient-caps=-all,{caps}"]
    if box.one("NoNewPrivileges") == "yes":
        setpriv.append("--nnp")
    os.execvp(setpriv[0], [*setpriv, sys.executable, "-m", MODULE, "--filter", str(unit), "--", *cmd])


# ---------------------------------------------------------------- stage two: the seccomp filter
class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_EQ = 4


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


def load_filter(box: UnitSandbox) -> int:
    """Loads the unit's filter into this process (inherited by what it execs); the calls allowed."""
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    c = ctypes
    lib.seccomp_rule_add_array.argtypes = [c.c_void_p, c.c_uint32, c.c_int, c.c_uint, c.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    code = getattr(errno, box.one("SystemCallErrorNumber", "EPERM"))
    ctx = lib.seccomp_init(_act_errno(code))
    assert ctx, "seccomp_init failed"
    families = box.address_families()
    allowed = 0
    for name in sorted(box.syscalls()):
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not a call of this architecture
            continue
        if name == "socket" and families:
            for fam in families:
                cmp = _ArgCmp(0, _SCMP_CMP_EQ, fam, 0)
                assert lib.seccomp_rule_add_array(ctx, _SCMP_ACT_ALLOW, nr, 1, ctypes.byref(cmp)) == 0
        else:
            assert lib.seccomp_rule_add_array(ctx, _SCMP_ACT_ALLOW, nr, 0, None) == 0, name
        allowed += 1
    assert lib.seccomp_load(ctx) == 0, "seccomp_load failed"
    return allowed


def prefix(unit: Path, writable: list[str]) -> list[str]:
    """The argv that runs what follows it under the unit's sandbox."""
    return ["unshare", "-m", sys.executable, "-m", MODULE, str(unit), ":".join(writable), "--"]


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    head, cmd = argv[:sep], argv[sep + 1 :]
    if head[0] == "--filter":
        load_filter(UnitSandbox.read(Path(head[1])))
        os.execvp(cmd[0], cmd)
    stage_one(Path(head[0]), [p for p in head[1].split(":") if p], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])

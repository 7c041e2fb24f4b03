"""Highly available Redis on this machine for the fleet tests: a Sentinel set and a Cluster.

- ``SentinelSet``: a master, a replica of it and three sentinels (``redis-server --sentinel``,
  quorum 2, the master declared down after ``down_after_ms``), all on free loopback ports;
  ``url`` is the guardian's ``redis+sentinel://`` URL, ``kill_master()`` SIGKILLs the master and
  ``wait_failover()`` waits until the sentinels name another one.
- ``ClusterSet``: three masters (``--cluster-enabled yes``) joined by
  ``redis-cli --cluster create ... --cluster-replicas 0``; ``url`` is the ``redis+cluster://`` URL.

Each is a context manager that stops every process it started and removes their folders.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from vllm_guardian.netaddr import free_port
from vllm_guardian.testing.redis_server import RedisServer, redis_executable

SERVICE = "mymaster"


def _wait(what: str, ok, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} not within {timeout:g}s")


class SentinelSet:
    def __init__(self, down_after_ms: int = 1000, sentinels: int = 3) -> None:
        self.down_after_ms = down_after_ms
        self.master = RedisServer(durable=True)
        self.replica = RedisServer(durable=True, args=("--replicaof", "127.0.0.1", str(self.master.port)))
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.dir = tempfile.mkdtemp(prefix="guardian-sentinel-")
        self._procs: list[subprocess.Popen[bytes]] = []
        self._killed: RedisServer | None = None

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def start(self) -> SentinelSet:
        self.master.start()
        self.replica.start()
        _wait("replica in sync", lambda: self.replica.client().info("replication")["master_link_status"] == "up", 15)
        for port in self.sentinel_ports:
            conf = Path(self.dir) / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                f"logfile {self.dir}/sentinel-{port}.log\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self._procs.append(
                subprocess.Popen(
                    [redis_executable(), str(conf), "--sentinel"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        for port in self.sentinel_ports:  # each sentinel knows the master, its replica and the others
            c = redis.Redis(port=port, socket_timeout=2, decode_responses=True)
            _wait(f"sentinel {port} ready", lambda c=c: self._sees_all(c), 20)
        return self

    def _sees_all(self, c: redis.Redis) -> bool:
        m: Any = c.sentinel_master(SERVICE)
        return int(m["num-slaves"]) >= 1 and int(m["num-other-sentinels"]) >= len(self.sentinel_ports) - 1

    def master_port(self) -> int:
        for port in self.sentinel_ports:
            try:
                c = redis.Redis(port=port, socket_timeout=2, decode_responses=True)
                addr: Any = c.sentinel_get_master_addr_by_name(SERVICE)
                return int(addr[1])
            except (redis.RedisError, OSError):
                continue
        raise RuntimeError("no sentinel answers")

    def kill_master(self) -> int:
        """SIGKILL the current master (as in a crash); its port."""
        port = self.master_port()
        self._killed = self.master if port == self.master.port else self.replica
        self._killed.kill()
        return port

    def restart_killed(self) -> None:
        """Start the killed server again (same port, same files): the sentinels make it a replica."""
        if self._killed is not None:
            self._killed.start()

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until the sentinels name a master other than ``old_port`` that accepts writes; its port."""

        def promoted() -> bool:
            port = self.master_port()
            return port != old_port and redis.Redis(port=port, socket_timeout=1).info("replication")["role"] == "master"

        _wait("failover", promoted, timeout)
        return self.master_port()

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self._procs.clear()
        self.master.stop()
        self.replica.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SentinelSet:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def cluster_port() -> int:
    """A free port at most 55535 whose cluster bus port (+10000) is free too."""
    for _ in range(1000):
        port = random.randint(20000, 55535)
        if _port_free(port) and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class ClusterSet:
    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            RedisServer(
                cluster_port(),
                args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ),
            )
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> ClusterSet:
        for n in self.nodes:
            n.start()
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for n in self.nodes:
            c = n.client()
            _wait(
                f"cluster state ok on {n.port}",
                lambda c=c: c.execute_command("CLUSTER INFO")["cluster_state"] == "ok",
                30,
            )
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> ClusterSet:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

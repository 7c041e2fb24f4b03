"""A simulated multi-node data-parallel group on this machine: a leader and a headless rank, two trees.

The leader (API server, ``VLLM::DPCoordinator``, ``VLLM::EngineCore_DP0``) and the headless "node"
(``--headless --data-parallel-start-rank 1``: ``VLLM::EngineCore_DP1``, no HTTP API) are two
``SimServer`` process trees in their own sessions, joined at the leader's
``--data-parallel-rpc-port`` (``vllm_guardian.sim.vllm.multi_node``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer


@dataclass
class SimGroup:
    leader: SimServer
    member: SimServer
    rpc_port: int

    @classmethod
    def start(cls, startup_delay: float = 2.0, log_dir=None) -> SimGroup:
        rpc = free_port("127.0.0.1")
        flags: tuple[str, ...] = ("--data-parallel-size", "2", "--data-parallel-size-local", "1")
        flags += ("--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc))
        logs = (None, None) if log_dir is None else (log_dir / "leader.log", log_dir / "member.log")
        leader = SimServer(startup_delay=startup_delay, extra_args=flags, log_path=logs[0]).start()
        member_flags = (*flags, "--headless", "--data-parallel-start-rank", "1")
        member = SimServer(startup_delay=startup_delay, extra_args=member_flags, log_path=logs[1]).start()
        return cls(leader, member, rpc)

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.leader.wait_ready(timeout)  # ready only once every rank, the headless one too, said so

    def restart_member(self) -> None:
        """A new headless node with the same flags (after the old one went)."""
        self.member = SimServer(
            startup_delay=self.member.startup_delay, extra_args=self.member.extra_args, log_path=self.member.log_path
        ).start()

    def stop(self) -> None:
        self.member.stop()
        self.leader.stop()

    def leftovers(self) -> tuple:
        return self.leader.leftovers() + self.member.leftovers()

"""Which group a process belongs to, read from what the deployment already says (pure).

Sources, first match wins per field:

- vLLM's data-parallel flags on the process's argv: ``--data-parallel-size``, ``-size-local``,
  ``-start-rank``, ``-address``, ``-rpc-port`` and ``--headless`` (a headless rank has no API server:
  its leader is the process that serves HTTP at ``--data-parallel-address``);
- ``--distributed-executor-backend ray`` on an API server, and Ray's worker processes
  (``ray::RayWorkerWrapper`` titles) that carry no vLLM flags at all;
- LeaderWorkerSet's environment (``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``) and
  its pod labels (``leaderworkerset.sigs.k8s.io/name``, ``…/group-index``, ``…/worker-index``);
- the operator's config, where none of these exist (``Configured``).

Every value is outside input (another user's argv, a pod's environment): a value that does not parse
makes the field unknown, never an exception, and the caller reports why (``GroupIdentity.problems``).
Nothing here makes the guardian act: an identity only groups evidence and names who leads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllm_guardian.discovery.argv import option_value

DP = "vllm-dp"  # vLLM data parallel (single or multi node)
RAY = "ray"  # vLLM with --distributed-executor-backend ray
LWS = "lws"  # LeaderWorkerSet on Kubernetes
CONFIGURED = "configured"  # named in the guardian's config

MAX_RANKS = 1024  # a size or rank above this is refused (no deployment has that many ranks per group)
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
RAY_WORKER_TITLE = re.compile(r"^ray::(RayWorkerWrapper|IDLE|RayWorker)")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,253}$")
_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


@dataclass(frozen=True)
class GroupIdentity:
    """One process's place in a group.

    ``group``: a stable name every member derives alike (leader address and port for vLLM DP, the LWS
    set and group index for LWS); ``rank``: the first rank this process hosts (``ranks`` all of them);
    ``leader``: True for the process with the API server; ``leader_address``: where the leader listens.
    """

    kind: str
    group: str
    size: int | None
    ranks: tuple[int, ...]
    leader: bool
    leader_address: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def rank(self) -> int | None:
        return self.ranks[0] if self.ranks else None


def _count(raw: str | None, what: str, problems: list[str], *, low: int = 1, high: int = MAX_RANKS) -> int | None:
    if raw is None:
        return None
    try:
        n = int(raw, 10)
    except ValueError:
        problems.append(f"{what} {raw[:32]!r} is not a whole number")
        return None
    if not low <= n <= high:
        problems.append(f"{what} {n} is outside {low}..{high}")
        return None
    return n


def _host(raw: str | None, what: str, problems: list[str]) -> str | None:
    if raw is None:
        return None
    if not _HOST.match(raw):
        problems.append(f"{what} {raw[:32]!r} is not a host name or address")
        return None
    return raw


def from_argv(cmdline: Sequence[str]) -> GroupIdentity | None:
    """The group a vLLM process's flags name (None: a single-process deployment, or no vLLM flags)."""
    args = tuple(cmdline)
    if not args:
        return None
    if RAY_WORKER_TITLE.match(args[0]):
        return GroupIdentity(kind=RAY, group="", size=None, ranks=(), leader=False)
    problems: list[str] = []
    headless = "--headless" in args
    raw_size = option_value(args, "--data-parallel-size")
    flag = "--data-parallel-size" if raw_size is not None else "-dp"
    if raw_size is None:
        raw_size = option_value(args, "-dp")
    size = _count(raw_size, flag, problems)
    backend = option_value(args, "--distributed-executor-backend")
    if (raw_size is None or size == 1) and not headless:
        if backend == "ray":
            return GroupIdentity(kind=RAY, group="", size=None, ranks=(), leader=True, problems=tuple(problems))
        return None
    local = _count(option_value(args, "--data-parallel-size-local"), "--data-parallel-size-local", problems)
    start = _count(option_value(args, "--data-parallel-start-rank"), "--data-parallel-start-rank", problems, low=0)
    address = _host(option_value(args, "--data-parallel-address"), "--data-parallel-address", problems)
    rpc = _count(option_value(args, "--data-parallel-rpc-port"), "--data-parallel-rpc-port", problems, high=65535)
    first = start if start is not None else 0
    n_local = local if local is not None else (size or 1)
    if size is not None and first + n_local > size:
        problems.append(f"ranks {first}..{first + n_local - 1} exceed --data-parallel-size {size}")
        n_local = max(0, size - first)
    leader = not headless and first == 0
    where = f"{address or '127.0.0.1'}:{rpc}" if rpc is not None else (address or "local")
    return GroupIdentity(
        kind=DP,
        group=f"dp@{where}",
        size=size,
        ranks=tuple(range(first, first + n_local)),
        leader=leader,
        leader_address=address,
        problems=tuple(problems),
    )


def from_lws(environ: Mapping[str, str], labels: Mapping[str, str] | None = None) -> GroupIdentity | None:
    """The LeaderWorkerSet group of a pod, from its environment and (when read) its labels."""
    labels = labels or {}
    leader_addr = environ.get("LWS_LEADER_ADDRESS")
    if leader_addr is None and LWS_NAME not in labels:
        return None
    problems: list[str] = []
    size = _count(environ.get("LWS_GROUP_SIZE"), "LWS_GROUP_SIZE", problems)
    index_raw = environ.get("LWS_WORKER_INDEX", labels.get(LWS_WORKER_INDEX))
    index = _count(index_raw, "LWS_WORKER_INDEX", problems, low=0)
    address = _host(leader_addr, "LWS_LEADER_ADDRESS", problems)
    name = labels.get(LWS_NAME)
    if name is not None and not _NAME.match(name):
        problems.append(f"label {LWS_NAME} {name[:32]!r} is not a name")
        name = None
    group_index = _count(labels.get(LWS_GROUP_INDEX), LWS_GROUP_INDEX, problems, low=0)
    if name is not None and group_index is not None:
        group = f"lws/{name}/{group_index}"
    elif address is not None:  # the leader's address (its pod's DNS name) names the group
        group = f"lws@{address}"
    else:
        group = ""
    return GroupIdentity(
        kind=LWS,
        group=group,
        size=size,
        ranks=(index,) if index is not None else (),
        leader=index == 0,
        leader_address=address,
        problems=tuple(problems),
    )


def configured(*, group: str, rank: int, size: int, leader_address: str | None = None) -> GroupIdentity:
    """A group the operator names in the config (checked there: name, 0 <= rank < size)."""
    return GroupIdentity(
        kind=CONFIGURED,
        group=group,
        size=size,
        ranks=(rank,),
        leader=rank == 0,
        leader_address=leader_address,
    )


def identify(
    cmdline: Sequence[str],
    environ: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> GroupIdentity | None:
    """The group of one process: LWS (the pod says which group) over vLLM's flags (which ranks)."""
    dp = from_argv(cmdline)
    lws = from_lws(environ or {}, labels)
    if lws is None:
        return dp
    if dp is not None and dp.kind == DP:  # DP inside an LWS group: LWS names it, vLLM's flags the ranks
        return GroupIdentity(
            kind=LWS,
            group=lws.group or dp.group,
            size=lws.size,
            ranks=dp.ranks,
            leader=lws.leader,
            leader_address=lws.leader_address or dp.leader_address,
            problems=lws.problems + dp.problems,
        )
    return lws

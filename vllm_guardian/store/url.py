"""What kind of fleet store a Redis URL names: one server, a Sentinel-managed master, or a Cluster.

Pure: a string in, a ``StoreUrl`` (or a ``ConfigError`` naming ``alerts.redis_url``) out. The forms:

- ``redis://``, ``rediss://`` (TLS), ``unix://``: one server, as redis-py reads them (``from_url``);
- ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/<service>[/<db>]``: the master
  that the sentinels at those addresses (port 26379 when omitted) name ``<service>``;
  ``rediss+sentinel://`` talks TLS to the master (and its replicas). The sentinels are asked
  without a password; the user and password are the data nodes';
- ``redis+cluster://[[user]:password@]host[:port][,host[:port]...]``: a Redis Cluster found from
  any of these seed nodes (port 6379 when omitted); ``rediss+cluster://`` with TLS. A Cluster has
  only database 0: a path other than ``/`` or ``/0`` is refused.

redis-py has no URL of its own for either (``RedisCluster.from_url`` takes a plain ``redis://``
seed, which cannot be told from a single server), hence the ``+sentinel`` / ``+cluster`` schemes,
the spelling other Redis clients use. No query parameters are accepted on these two forms: a
typo there must be a clear error, not a silently ignored option. At most ``MAX_HOSTS`` addresses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from vllm_guardian.errors import ConfigError

SINGLE, SENTINEL, CLUSTER = "single", "sentinel", "cluster"
SINGLE_SCHEMES = ("redis://", "rediss://", "unix://")
HA_SCHEMES = {
    "redis+sentinel": (SENTINEL, False),
    "rediss+sentinel": (SENTINEL, True),
    "redis+cluster": (CLUSTER, False),
    "rediss+cluster": (CLUSTER, True),
}
DEFAULT_PORT = {SENTINEL: 26379, CLUSTER: 6379}
MAX_HOSTS = 16
KEY = "alerts.redis_url"
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]{1,253}")
_SERVICE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True)
class StoreUrl:
    """The fleet store a URL names. ``hosts``: the sentinels (Sentinel) or seed nodes (Cluster)."""

    kind: str  # single | sentinel | cluster
    url: str
    hosts: tuple[tuple[str, int], ...] = ()
    service: str | None = None  # the Sentinel master's name
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @property
    def highly_available(self) -> bool:
        """A store that can fail over (Sentinel) or reshard (Cluster): a lease there needs replicas' word."""
        return self.kind != SINGLE


def _bad(why: str) -> ConfigError:
    return ConfigError([f"{KEY}: {why}"])


def _hostport(text: str, default_port: int) -> tuple[str, int]:
    host, port = text, default_port
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise _bad(f"{text!r} is not host[:port]")
            port = _port(rest[1:], text)
    elif ":" in text:
        host, _, p = text.rpartition(":")
        port = _port(p, text)
    if not _HOST.fullmatch(host):
        raise _bad(f"{text!r}: {host!r} is not a host name or address")
    return host.strip("[]"), port


def _port(text: str, where: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _bad(f"{where!r}: the port must be a number from 1 to 65535")
    return int(text)


def parse(url: str) -> StoreUrl:
    """The store ``url`` names; raises ``ConfigError`` (with the key path) on anything malformed."""
    if not isinstance(url, str) or not url:
        raise _bad("a URL is required")
    if url.startswith(SINGLE_SCHEMES):
        return StoreUrl(SINGLE, url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in HA_SCHEMES:
        raise _bad(
            f'unknown scheme "{(scheme + sep if sep else url)[:20]}": expected redis://, rediss://, unix://, '
            "redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://"
        )
    kind, tls = HA_SCHEMES[scheme.lower()]
    if "?" in rest or "#" in rest:
        raise _bad(f"{scheme}:// takes no query parameters or fragment")
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, has_pw, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if has_pw else None
    parts = netloc.split(",")
    if not netloc or any(not p for p in parts):
        raise _bad(f"{scheme}:// needs at least one host[:port] (comma-separated, no empty entries)")
    if len(parts) > MAX_HOSTS:
        raise _bad(f"at most {MAX_HOSTS} addresses, not {len(parts)}")
    hosts = tuple(_hostport(p, DEFAULT_PORT[kind]) for p in parts)
    segments = [s for s in path.split("/") if s] if path else []
    service, db = None, 0
    if kind == SENTINEL:
        if not segments:
            raise _bad(f"{scheme}:// needs the master's name: {scheme}://host:26379/mymaster")
        if len(segments) > 2 or not _SERVICE.fullmatch(segments[0]):
            raise _bad(f"the path must be /<master name>[/<db>] (letters, digits, '_.:-'), not /{path}")
        service = segments[0]
        if len(segments) == 2:
            db = _db(segments[1])
    elif segments and (len(segments) > 1 or _db(segments[0]) != 0):
        raise _bad(f"a Redis Cluster has only database 0; drop the path /{path}")
    return StoreUrl(kind, url, hosts, service, db, username, password, tls)


def _db(text: str) -> int:
    if not text.isdigit() or int(text) > 15:
        raise _bad(f"the database must be a number from 0 to 15, not {text!r}")
    return int(text)


def problem(url: str) -> str | None:
    """Why ``url`` is not a fleet store URL (the message without the key path), or None."""
    try:
        parse(url)
    except ConfigError as e:
        return str(e.problems[0]).removeprefix(f"{KEY}: ")
    return None

"""The Redis client of every guardian Redis user: how it is made and what of it may be logged.

The one place a client is built from a URL (one server, Sentinel or Cluster: ``store_url``).
Reads the ``alerts`` URL and the password (``alerts.password_env`` names a variable,
``alerts.password_file`` a file); decides the client's bounds (every call carries the timeout, no
client-side retries: each user has its own backoff), how a URL is masked for the log, and sends
the one message that is never spooled: a best-effort live control message.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit

from vllm_guardian import store_url
from vllm_guardian.errors import ConfigError

log = logging.getLogger(__name__)


def mask_url(url: str) -> str:
    """The URL with any password (userinfo or ``?password=``) replaced by ``***``: safe to log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable redis url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, sep, _pw = userinfo.partition(":")
        if sep:
            netloc = f"{user}:***@{hostport}"
    query = parts.query
    if query:
        pairs = [(k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="*")
    text = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    return text + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def resolve_password(
    password_env: str | None, password_file: str | None, *, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The Redis password from ``alerts.password_env`` (a variable name) or ``alerts.password_file``."""
    if password_env:
        value = environ.get(password_env)
        if value is None:
            raise ConfigError([f"alerts.password_env: environment variable {password_env} is not set"])
        return value
    if password_file:
        try:
            return Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise ConfigError([f"alerts.password_file: cannot read {password_file}: {e.strerror}"]) from None
    return None


def make_client(url: str, *, password: str | None = None, timeout: float = 2.0, decode: bool = True):
    """A redis-py client for any fleet-store URL (``store_url``): one server (``redis://``,
    ``rediss://``, ``unix://``), the master a Sentinel names (``redis+sentinel://``: every new
    connection asks the sentinels where the master is now, so a failover is followed on the next
    call after an error) or a Cluster (``redis+cluster://``: each key goes to the node of its slot;
    built on first use, so a Cluster that is down at start is an error of the first call, not of
    the start).

    Every call is bounded by ``timeout`` (connect and read); client-side retries are off (each
    user has its own backoff). ``password`` (``alerts.password_env`` / ``password_file``) wins
    over one written in the URL. Raises ``ConfigError`` for a malformed URL.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    where = store_url.parse(url)
    kwargs: dict[str, Any] = dict(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=decode,
    )
    if where.kind == store_url.SINGLE:
        kwargs["retry_on_timeout"] = False
        if password is not None:
            kwargs["password"] = password
        return redis.Redis.from_url(url, **kwargs)
    kwargs["username"] = where.username
    kwargs["password"] = password if password is not None else where.password
    if where.tls:
        kwargs["ssl"] = True
    if where.kind == store_url.SENTINEL:
        from redis.sentinel import Sentinel

        sentinel_kwargs = dict(socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
        sentinels = Sentinel(list(where.hosts), sentinel_kwargs=sentinel_kwargs)
        return sentinels.master_for(where.service or "", db=where.db, **kwargs)
    return LazyCluster(where.hosts, kwargs)


class LazyCluster:
    """A ``redis.cluster.RedisCluster`` made on first use (its constructor connects to learn the
    slots; a Cluster down at the guardian's start must be a failed call, not a failed start).
    Any attribute is the cluster client's; ``undecoded()`` a twin that returns bytes."""

    def __init__(self, hosts: tuple[tuple[str, int], ...], kwargs: Mapping[str, Any]) -> None:
        self._hosts, self._kwargs = hosts, dict(kwargs)
        self._client: Any = None

    def cluster(self) -> Any:
        if self._client is None:
            import redis
            from redis.cluster import ClusterNode, RedisCluster
            from redis.exceptions import RedisClusterException

            try:
                self._client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in self._hosts], **self._kwargs)
            except RedisClusterException as e:  # "cannot be connected": the same as any server down
                raise redis.ConnectionError(f"Redis Cluster: {e}") from None
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster(), name)

    def undecoded(self) -> LazyCluster:
        return LazyCluster(self._hosts, dict(self._kwargs, decode_responses=False))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def connection_for(client: Any, key: str) -> Any:
    """The client of the one server that holds ``key``: the client itself, or in a Cluster the
    node of the key's slot (for what must run on one connection, as ``WAIT`` after a write)."""
    if isinstance(client, LazyCluster):
        return client.cluster().get_node_from_key(key).redis_connection
    return client


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a failed Redis call raises: redis-py's errors, its Cluster client's (not RedisErrors) and the socket's."""
    import redis
    from redis.exceptions import RedisClusterException

    return (redis.RedisError, RedisClusterException, OSError)


def publish_control(client, channel: str, payload: Mapping[str, Any]) -> bool:
    """Best-effort live control message (e.g. ``{"action": "drain", "target": ...}``): True if sent."""
    try:
        client.publish(channel, json.dumps(payload, separators=(",", ":")))
        return True
    except redis_errors() as e:
        log.warning("control message on %s not sent: %s", channel, e)
        return False

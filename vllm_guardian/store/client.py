"""How a redis-py client is made from any fleet-store URL: one server, a Sentinel-managed master, a
Cluster (``store_url``). The one place a client is built from a URL; every Redis user of the
guardian (``sinks/redis_client.py`` re-exports it), the gateway's reporter and the CLI go through it.
``connection_for`` names the one server that holds a key (for ``WAIT`` after a write).
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_guardian.store import url as store_url


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
        sentinel_kwargs = dict(socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
        sentinels = _sentinel_class()(list(where.hosts), sentinel_kwargs=sentinel_kwargs)
        return sentinels.master_for(where.service or "", db=where.db, **kwargs)
    return LazyCluster(where.hosts, kwargs)


def _sentinel_class() -> Any:
    """redis-py's Sentinel, whose "no master" error names the sentinels asked instead of printing
    each sentinel client's whole repr (it reaches the log and the status)."""
    from redis.sentinel import MasterNotFoundError, Sentinel

    class ShortSentinel(Sentinel):
        def discover_master(self, service_name: str) -> Any:
            try:
                return super().discover_master(service_name)
            except MasterNotFoundError:
                asked = ", ".join(
                    f"{s.connection_pool.connection_kwargs.get('host')}:{s.connection_pool.connection_kwargs.get('port')}"
                    for s in self.sentinels
                )
                raise MasterNotFoundError(f"no sentinel of {asked} names a master {service_name!r}") from None

    return ShortSentinel


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

    def get_encoder(self) -> Any:
        """The encoder the cluster client would have (``register_script`` asks it before any call)."""
        from redis.connection import Encoder

        return Encoder("utf-8", "strict", bool(self._kwargs.get("decode_responses")))

    def register_script(self, script: str) -> Any:
        """A script bound to this lazy client: registering it connects to nothing."""
        from redis.commands.core import Script

        return Script(self, script)  # type: ignore[arg-type] # it proxies a RedisCluster

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

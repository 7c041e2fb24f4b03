"""The Redis client of every guardian Redis user: how it is made and what of it may be logged.

The client itself is built from the URL in ``store_client`` (one server, Sentinel or Cluster),
re-exported here.
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

from vllm_guardian.store.client import LazyCluster, connection_for, make_client
from vllm_guardian.errors import ConfigError

__all__ = [
    "LazyCluster",
    "connection_for",
    "make_client",
    "mask_url",
    "publish_control",
    "redis_errors",
    "resolve_password",
]

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

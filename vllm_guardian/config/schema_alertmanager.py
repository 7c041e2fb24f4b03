"""The ``alerts.alertmanager`` section: where incident alerts are pushed (Alertmanager API v2) and
how often a firing one is sent again; ``url_problem`` says what is wrong with one URL (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from vllm_guardian.config.schema_fields import INTERVAL, SECONDS, setting

MAX_INSTANCES = 8  # Alertmanagers pushed to: each has a spool and a thread of its own


@dataclass(frozen=True)
class AlertmanagerConfig:
    urls: tuple[str, ...] = setting(
        (),
        doc="every Alertmanager of the HA set (http[s]://host:port[/prefix]), each sent every alert; "
        "empty: no direct push",
    )
    resend_interval: float = setting(
        60.0,
        "positive",
        "seconds between re-sends of a firing alert (it stays open 4 intervals past the last)",
        bound=INTERVAL,
    )
    timeout: float = setting(5.0, "positive", "seconds for one POST, the whole answer included", bound=SECONDS)


def url_problem(url: str) -> str:
    """What an Alertmanager URL should be, when it is not ("" when it is fine)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "an http:// or https:// URL with a valid port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "an http:// or https:// URL with a host"
    if parts.username or parts.password:
        return "a URL without credentials (they would be printed in status and logs)"
    if parts.query or parts.fragment:
        return "a URL without a query or fragment"
    return ""

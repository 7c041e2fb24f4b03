"""The web config the HTTP listener applies now (``api.web_config_file``): the TLS context and the
basic-auth users built from it, swapped whole on a reload.

Reads: the web config file (``config/web.py``) and the certificate files it names (``host/tls.py``).
Decides: when to re-read them (``reload``: on SIGHUP; ``reload_if_changed``: when the stamp of any
of those files changed, so a rotated certificate or a Kubernetes Secret update takes effect without
a signal) and whether the new one replaces the running one. A file that does not load (bad YAML, a
key that does not match its certificate, a missing file, ...) is refused: the running web config
stays, the problem is logged as an error and kept for status (``http.web_config.last_error``),
and ``reload_failures`` counts it. Each connection reads ``current`` once, so it is served start to
end by one web config.
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass
from typing import Callable

from vllm_guardian.config.web import WebConfig, load_web_config
from vllm_guardian.errors import ConfigError
from vllm_guardian.host.tls import Stamp, server_context, stamp
from vllm_guardian.surface.web_auth import BasicAuth


@dataclass(frozen=True)
class ActiveWebConfig:
    """One loaded web config: what a connection is served with."""

    config: WebConfig
    tls: ssl.SSLContext | None  # None: plain HTTP
    auth: BasicAuth | None  # None: no basic auth
    files: tuple[str, ...]  # the web config file and the files it names
    stamp: Stamp  # of ``files``, taken before they were read


def load_active(path: str) -> ActiveWebConfig:
    """The web config of ``path`` with its TLS context built; raises ``ConfigError`` naming
    ``api.web_config_file`` and the key at fault."""
    before = stamp((path,))
    cfg = load_web_config(path)
    tls = cfg.tls_server_config
    files = (path,) if tls is None else tuple(p for p in (path, tls.cert_file, tls.key_file, tls.client_ca_file) if p)
    first = before + stamp(files[1:])  # the certificate files, before they are read
    ctx = None
    if tls is not None:
        where = f"api.web_config_file ({path}): tls_server_config"
        ctx = server_context(
            tls.cert_file,
            tls.key_file,
            tls.client_ca_file,
            tls.client_auth_type,
            tls.min_version,
            tls.max_version,
            where,
        )
    auth = BasicAuth(cfg.basic_auth_users) if cfg.basic_auth_users else None
    return ActiveWebConfig(cfg, ctx, auth, files, first)


@dataclass(frozen=True)
class WebConfigStatus:
    """The status's ``http.web_config``: what is applied and how the reloads went."""

    file: str
    applied: str  # WebConfig.summary(): TLS versions and client policy, number of users
    loaded_at: float | None  # wall
    reloads: int = 0  # reloads applied since start
    reload_failures: int = 0  # reloads refused (the running web config kept)
    last_reload_ok: bool = True
    last_error: str = ""


class WebSecurity:
    """Holds the running web config; ``reload`` swaps it or keeps it (and says why)."""

    def __init__(
        self,
        path: str,
        log: logging.Logger | None = None,
        *,
        wall: Callable[[], float] = time.time,
        load: Callable[[str], ActiveWebConfig] = load_active,
    ) -> None:
        self.path = path
        self.log = log or logging.getLogger("guardian.http")
        self._wall = wall
        self._load = load
        self.current = load(path)  # a ConfigError here stops the start: nothing is served unprotected
        self._tried = self.current.stamp
        self._status = WebConfigStatus(path, self.current.config.summary(), wall())

    def reload(self, why: str = "SIGHUP") -> bool:
        """Re-read the web config; True when the new one is applied, False when it was refused."""
        self._tried = stamp(self.current.files)
        try:
            new = self._load(self.path)
        except ConfigError as e:
            msg = "; ".join(e.problems)
            self.log.error("web config reload (%s) refused, the running web config is kept: %s", why, msg)
            s = self._status
            self._status = WebConfigStatus(s.file, s.applied, s.loaded_at, s.reloads, s.reload_failures + 1, False, msg)
            return False
        self.current = new
        self._tried = new.stamp
        s = self._status
        self._status = WebConfigStatus(s.file, new.config.summary(), self._wall(), s.reloads + 1, s.reload_failures)
        self.log.info("web config reloaded (%s): %s", why, self._status.applied)
        return True

    def reload_if_changed(self) -> bool | None:
        """Reload when a file changed since the last try: True/False as ``reload``, None when
        nothing changed (a refused file is tried again only once it changes again)."""
        if stamp(self.current.files) == self._tried:
            return None
        return self.reload("a file changed")

    def scheme(self) -> str:
        """``https`` while the running web config asks for TLS, else ``http``."""
        return "http" if self.current.tls is None else "https"

    def status_section(self) -> WebConfigStatus:
        return self._status

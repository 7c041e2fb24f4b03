"""The web config of the HTTP listener (``api.web_config_file``): TLS and basic authentication in
the format of Prometheus' exporter-toolkit (node_exporter's ``--web.config.file``), loaded strictly.

Reads: one YAML file (at most ``MAX_WEB_CONFIG_BYTES``). Decides: whether it is a valid
``WebConfig``: the keys this guardian supports (``tls_server_config``: ``cert_file``, ``key_file``,
``client_ca_file``, ``client_auth_type``, ``min_version``, ``max_version``; ``basic_auth_users``:
name -> bcrypt hash), checked with the config loader's walk (``config/mapping.py``) so a problem
reads ``tls_server_config.client_auth_type: expected ...``. Every problem is collected and raised
at once in one ``ConfigError``, each line prefixed with ``api.web_config_file (<path>)``.

Refused with a reason of their own: the exporter-toolkit keys the guardian does not implement
(inline PEM, cipher suites, curves, SAN filters, HTTP headers, rate limits), the client
authentication types that ask for a certificate without verifying it, TLS below 1.2, a hash
that is not bcrypt (never quoted: it may be a plaintext password put there by mistake) or whose
cost would make one check outlast a request, and a file that asks for neither TLS nor users (an
empty or truncated file must never turn the protection off). The certificate files themselves
are read when the TLS context is built (``host/tls.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vllm_guardian.config.mapping import Invalid, Parser
from vllm_guardian.config.rules import show
from vllm_guardian.config.schema_fields import setting
from vllm_guardian.config.yaml_text import load_yaml
from vllm_guardian.errors import ConfigError

KEY = "api.web_config_file"
MAX_WEB_CONFIG_BYTES = 1024 * 1024  # a web config is a few hundred bytes; a bigger file is a mistake
MAX_BCRYPT_COST = 14  # one check of cost 14 takes ~1 s on a server core: still well inside a request's deadline
VERIFYING = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")  # need client_ca_file
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_UNSUPPORTED_TOP = {
    "http_server_config": "HTTP/2 and response headers are not offered by this listener",
    "rate_limit": "the listener bounds clients itself (connection cap and per-request deadline)",
}
_UNSUPPORTED_TLS = {
    "cert": "inline PEM is not supported: name a file with cert_file",
    "key": "inline PEM is not supported: name a file with key_file",
    "client_ca": "inline PEM is not supported: name a file with client_ca_file",
    "cipher_suites": "not supported: OpenSSL's defaults for the TLS versions allowed are used",
    "curve_preferences": "not supported: OpenSSL's defaults are used",
    "prefer_server_cipher_suites": "not supported: OpenSSL's defaults are used",
    "client_allowed_sans": "not supported: any client certificate the client_ca_file signed is accepted",
}
_UNVERIFIED_AUTH = ("RequestClientCert", "RequireAnyClientCert")
_OLD_TLS = ("TLS10", "TLS11")


@dataclass(frozen=True)
class TlsServerConfig:
    """``tls_server_config``: the server's certificate and the client certificate policy."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = setting(None, doc="CA bundle that signs the client certificates")
    client_auth_type: str = setting(
        "NoClientCert", "client_auth_type", "NoClientCert | VerifyClientCertIfGiven | RequireAndVerifyClientCert"
    )
    min_version: str = setting("TLS12", "tls_version", "TLS12 | TLS13")
    max_version: str = setting("TLS13", "tls_version", "TLS12 | TLS13")

    @property
    def requires_client_cert(self) -> bool:
        return self.client_auth_type == "RequireAndVerifyClientCert"


@dataclass(frozen=True)
class WebConfig:
    """The whole file: TLS (None: plain HTTP) and the basic-auth users (empty: no basic auth)."""

    tls_server_config: TlsServerConfig | None = None
    basic_auth_users: dict[str, str] = setting({}, doc="user name -> bcrypt hash of the password")

    def summary(self) -> str:
        """What it asks for, in words (no secret)."""
        tls = self.tls_server_config
        parts = ["plain HTTP" if tls is None else f"TLS ({tls.min_version}..{tls.max_version}, {tls.client_auth_type})"]
        parts.append(f"basic auth ({len(self.basic_auth_users)} users)" if self.basic_auth_users else "no basic auth")
        return ", ".join(parts)


def bcrypt_cost(value: str) -> int | None:
    """The cost of a bcrypt hash (``$2a$``, ``$2b$`` or ``$2y$``), or None when it is not one."""
    m = _BCRYPT.fullmatch(value)
    return int(m.group(1)) if m else None


def _unsupported(data: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``data`` without the keys refused with a reason of their own (each one a problem)."""
    out = {k: v for k, v in data.items() if k not in _UNSUPPORTED_TOP}
    problems.extend(f"{k}: {why}" for k, why in _UNSUPPORTED_TOP.items() if k in data)
    tls = out.get("tls_server_config")
    if isinstance(tls, dict):
        problems.extend(f"tls_server_config.{k}: {why}" for k, why in _UNSUPPORTED_TLS.items() if k in tls)
        tls = {k: v for k, v in tls.items() if k not in _UNSUPPORTED_TLS}
        if tls.get("client_auth_type") in _UNVERIFIED_AUTH:
            problems.append(
                f"tls_server_config.client_auth_type: {tls.pop('client_auth_type')} asks for a certificate without "
                "verifying it, which proves nothing; use RequireAndVerifyClientCert (with client_ca_file)"
            )
        for key in ("min_version", "max_version"):
            if tls.get(key) in _OLD_TLS:
                problems.append(f"tls_server_config.{key}: {tls.pop(key)} is deprecated (RFC 8996); use TLS12 or TLS13")
        out["tls_server_config"] = tls
    return out


def _check_tls(tls: TlsServerConfig, problems: list[str]) -> None:
    where = "tls_server_config"
    auth, ca = tls.client_auth_type, tls.client_ca_file
    if auth in VERIFYING and not ca:
        problems.append(f"{where}.client_ca_file: required when client_auth_type is {auth} (it signs the client certs)")
    if isinstance(ca, str) and ca and auth == "NoClientCert":
        problems.append(
            f"{where}.client_ca_file: set, but client_auth_type is NoClientCert (no client certificate is asked "
            "for); set client_auth_type: RequireAndVerifyClientCert, or remove client_ca_file"
        )
    versions = ("TLS12", "TLS13")
    if tls.min_version in versions and tls.max_version in versions and tls.min_version > tls.max_version:
        problems.append(f"{where}: min_version {tls.min_version} is above max_version {tls.max_version}")


def _check_users(users: dict[str, Any], problems: list[str]) -> None:
    for name, hashed in users.items():
        where = f"basic_auth_users.{name}"
        if not name or ":" in name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            problems.append(f"{where}: a user name must be non-empty, without ':' or control characters")
        if not isinstance(hashed, str):
            continue  # the walk said what is wrong with it
        cost = bcrypt_cost(hashed)
        if cost is None:  # never quoted: a plaintext password put here by mistake would reach the log
            problems.append(
                f"{where}: expected a bcrypt hash ($2a$, $2b$ or $2y$, 60 characters), got a string of "
                f"{len(hashed)} characters that is not one (a plaintext password? docs/operate.md says how to hash it)"
            )
        elif not 4 <= cost <= MAX_BCRYPT_COST:
            problems.append(
                f"{where}: bcrypt cost {cost} is outside 4..{MAX_BCRYPT_COST} (one check must fit a request's deadline)"
            )


def parse_web_config(data: Any) -> WebConfig:
    """Maps loaded YAML data onto ``WebConfig``; raises ``ConfigError`` with every problem (key paths
    relative to the file)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"expected a mapping at the top level, got {show(data)}"])
    problems: list[str] = []
    parser = Parser()
    cfg = parser.section(WebConfig, _unsupported(data, problems), "")
    problems.extend(parser.problems)
    if isinstance(cfg.tls_server_config, TlsServerConfig):
        _check_tls(cfg.tls_server_config, problems)
    if isinstance(cfg.basic_auth_users, dict):
        _check_users(cfg.basic_auth_users, problems)
    if not problems and cfg.tls_server_config is None and not cfg.basic_auth_users:
        problems.append(
            "asks for neither TLS (tls_server_config) nor basic auth (basic_auth_users); "
            f"to serve plain HTTP without authentication, unset {KEY}"
        )
    if problems or isinstance(cfg.tls_server_config, Invalid):
        raise ConfigError(problems)
    return cfg


def read_capped(path: str, limit: int, at: str, kind: str) -> bytes:
    """At most ``limit`` bytes of a file the config names; a ``ConfigError`` starting with ``at``
    when it is missing, a directory, unreadable or larger (``kind``: what it should have been)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except FileNotFoundError:
        raise ConfigError([f"{at}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{at}: is a directory, not a {kind}"]) from None
    except OSError as exc:
        raise ConfigError([f"{at}: cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > limit:
        raise ConfigError([f"{at}: larger than {limit} bytes; not a {kind}"])
    return raw


def load_web_config(path: str) -> WebConfig:
    """Reads and validates the web config file; every problem line starts with ``api.web_config_file
    (<path>)``."""
    where = f"{KEY} ({path})"
    raw = read_capped(path, MAX_WEB_CONFIG_BYTES, where, "web config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{where}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        return parse_web_config(load_yaml(text, where))
    except ConfigError as e:
        raise ConfigError([p if p.startswith(where) else f"{where}: {p}" for p in e.problems]) from None

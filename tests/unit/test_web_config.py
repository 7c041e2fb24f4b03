"""The web config of the HTTP listener (config/web.py): exporter-toolkit's format, read strictly.
Each problem names its key; the keys the guardian does not implement, unverified client
certificates, TLS below 1.2 and a file that asks for nothing are refused with their reason; a
password hash that is not bcrypt is never quoted (it may be a plaintext password)."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.web import TlsServerConfig, WebConfig, bcrypt_cost, load_web_config, parse_web_config
from vllm_guardian.errors import ConfigError

HASH = "$2b$10$" + "a" * 53  # the shape of a bcrypt hash, cost 10
TLS = {"cert_file": "/etc/guardian/tls/tls.crt", "key_file": "/etc/guardian/tls/tls.key"}
CA = "/etc/guardian/tls/ca.crt"


def problems(data) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_web_config(data)
    return e.value.problems


# ------------------------------------------------------------------ accepted
@pytest.mark.parametrize(
    "data, expected",
    [
        ({"tls_server_config": TLS}, WebConfig(TlsServerConfig(**TLS))),
        ({"basic_auth_users": {"prom": HASH}}, WebConfig(None, {"prom": HASH})),
        (
            {
                "tls_server_config": {**TLS, "client_ca_file": CA, "client_auth_type": "RequireAndVerifyClientCert"},
                "basic_auth_users": {"prom": "$2y$04$" + "b" * 53},
            },
            WebConfig(
                TlsServerConfig(**TLS, client_ca_file=CA, client_auth_type="RequireAndVerifyClientCert"),
                {"prom": "$2y$04$" + "b" * 53},
            ),
        ),
        (
            {"tls_server_config": {**TLS, "min_version": "TLS13", "max_version": "TLS13"}},
            WebConfig(TlsServerConfig(**TLS, min_version="TLS13", max_version="TLS13")),
        ),
    ],
    ids=["tls", "users", "mtls_and_users", "tls13_only"],
)
def test_a_valid_web_config_is_read(data, expected):
    assert parse_web_config(data) == expected


def test_the_defaults_are_exporter_toolkits():
    tls = parse_web_config({"tls_server_config": TLS}).tls_server_config
    assert tls is not None
    assert (tls.client_auth_type, tls.min_version, tls.max_version, tls.requires_client_cert) == (
        "NoClientCert",
        "TLS12",
        "TLS13",
        False,
    )


# ------------------------------------------------------------------ refused, with the key and why
@pytest.mark.parametrize(
    "data, expected",
    [
        ({"tls_server_config": {"cert_file": "/c"}}, "tls_server_config.key_file: required"),
        ({"tls_server_config": {**TLS, "client_auth_type": "Maybe"}}, "tls_server_config.client_auth_type: expected"),
        (
            {"tls_server_config": {**TLS, "client_auth_type": "RequireAnyClientCert"}},
            "tls_server_config.client_auth_type: RequireAnyClientCert asks for a certificate without verifying it",
        ),
        (
            {"tls_server_config": {**TLS, "client_auth_type": "RequestClientCert"}},
            "tls_server_config.client_auth_type: RequestClientCert asks for a certificate without verifying it",
        ),
        (
            {"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert"}},
            "tls_server_config.client_ca_file: required when client_auth_type is RequireAndVerifyClientCert",
        ),
        (
            {"tls_server_config": {**TLS, "client_ca_file": CA}},
            "tls_server_config.client_ca_file: set, but client_auth_type is NoClientCert",
        ),
        ({"tls_server_config": {**TLS, "min_version": "TLS10"}}, "tls_server_config.min_version: TLS10 is deprecated"),
        ({"tls_server_config": {**TLS, "max_version": "TLS11"}}, "tls_server_config.max_version: TLS11 is deprecated"),
        (
            {"tls_server_config": {**TLS, "min_version": "TLS13", "max_version": "TLS12"}},
            "tls_server_config: min_version TLS13 is above max_version TLS12",
        ),
        ({"tls_server_config": {**TLS, "cipher_suites": ["X"]}}, "tls_server_config.cipher_suites: not supported"),
        ({"tls_server_config": {**TLS, "cert": "PEM"}}, "tls_server_config.cert: inline PEM is not supported"),
        ({"tls_server_config": TLS, "http_server_config": {"http2": False}}, "http_server_config: HTTP/2"),
        ({"tls_server_config": TLS, "rate_limit": {"burst": 1}}, "rate_limit: the listener bounds clients itself"),
        ({"tls_server_config": TLS, "tls_config": {}}, "tls_config: unknown key (known: tls_server_config"),
        ({"tls_server_config": "yes"}, "tls_server_config: expected a mapping"),
        ({"basic_auth_users": {"prom": 12}}, "basic_auth_users.prom: expected a string"),
        ({"basic_auth_users": ["prom"]}, "basic_auth_users: expected a mapping"),
        ({"basic_auth_users": {"a:b": HASH}}, "basic_auth_users.a:b: a user name must be non-empty, without ':'"),
        (
            {"basic_auth_users": {"prom": "$2b$15$" + "a" * 53}},
            "basic_auth_users.prom: bcrypt cost 15 is outside 4..14",
        ),
        ({"basic_auth_users": {"prom": "$2b$03$" + "a" * 53}}, "basic_auth_users.prom: bcrypt cost 3 is outside"),
        ({}, "asks for neither TLS (tls_server_config) nor basic auth (basic_auth_users)"),
        (None, "asks for neither TLS"),
        ({"basic_auth_users": {}}, "asks for neither TLS"),
        (["tls"], "expected a mapping at the top level"),
    ],
)
def test_a_problem_names_its_key_and_what_is_wrong(data, expected):
    found = problems(data)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("secret", ["hunter2", "$2b$10$tooshort", "$1$md5$notbcryptatall", "x" * 60])
def test_a_hash_that_is_not_bcrypt_is_refused_without_quoting_it(secret):
    (line,) = problems({"basic_auth_users": {"prom": secret}})
    assert line.startswith("basic_auth_users.prom: expected a bcrypt hash") and secret not in line


def test_every_problem_is_reported_at_once():
    found = problems(
        {"tls_server_config": {"cert_file": "/c", "min_version": "TLS10"}, "basic_auth_users": {"p": "plain"}}
    )
    assert len(found) == 3, found


@pytest.mark.parametrize(
    "value, cost",
    [
        (HASH, 10),
        ("$2a$04$" + "x" * 53, 4),
        ("$2y$12$" + "./" * 26 + "a", 12),
        ("$2x$10$" + "a" * 53, None),
        ("", None),
    ],
)
def test_bcrypt_cost_reads_the_cost_of_a_hash(value, cost):
    assert bcrypt_cost(value) == cost


# ------------------------------------------------------------------ the file
@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "no such file"),
        (b"\xff\xfe", "not UTF-8"),
        (b"tls_server_config: {cert_file: a, cert_file: b}\n", "duplicate key"),
        (b"a" * (1024 * 1024 + 1), "larger than"),
        (b"basic_auth_users: {prom: plain}\n", "basic_auth_users.prom: expected a bcrypt hash"),
    ],
    ids=["missing", "not_utf8", "duplicate", "huge", "plaintext"],
)
def test_a_bad_file_is_a_config_error_naming_the_config_key_and_the_file(tmp_path, content, expected):
    path = tmp_path / "web.yml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_web_config(str(path))
    (line,) = e.value.problems
    assert line.startswith(f"api.web_config_file ({path}): ") and expected in line


def test_a_directory_is_not_a_web_config(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_web_config(str(tmp_path))


# ------------------------------------------------------------------ the guardian's config key
def test_a_web_config_without_the_listener_is_refused():
    with pytest.raises(ConfigError, match=r"api.web_config_file: set, but api.http is null"):
        parse_config({"api": {"http": None, "web_config_file": "/etc/guardian/web.yml"}})


def test_the_web_config_is_off_by_default():
    assert parse_config({}).api.web_config_file is None

"""The TLS context of the HTTP listener built from real files (host/tls.py): a certificate and key
made in the test load; every bad file is one ``ConfigError`` line naming the key at fault and
what is wrong, never the key's content, and an encrypted key is refused rather than prompted for."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.support.certs import Pki
from vllm_guardian.errors import ConfigError
from vllm_guardian.host.tls import server_context, stamp


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def build(cert: Path, key: Path, ca: Path | None = None, auth: str = "NoClientCert") -> ssl.SSLContext:
    return server_context(str(cert), str(key), str(ca) if ca else None, auth, "TLS12", "TLS13")


def test_a_certificate_and_its_key_make_a_server_context(pki):
    cert, key = pki.server
    ctx = build(cert, key, pki.ca.cert_file, "RequireAndVerifyClientCert")
    assert (ctx.verify_mode, ctx.minimum_version) == (ssl.CERT_REQUIRED, ssl.TLSVersion.TLSv1_2)
    assert ctx.options & ssl.OP_NO_RENEGOTIATION


def encrypted(key: Path, fmt: serialization.PrivateFormat, out: Path) -> Path:
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    out.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, fmt, serialization.BestAvailableEncryption(b"passphrase-nobody-types")
        )
    )
    return out


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing_cert", "tls_server_config.cert_file ({cert}): no such file"),
        ("missing_key", "tls_server_config.key_file ({key}): no such file"),
        ("junk_cert", "tls_server_config.cert_file ({cert}): holds no PEM certificates"),
        ("junk_key", "tls_server_config.key_file ({key}): holds no PEM private key"),
        ("key_of_another", "the key does not match the certificate"),
        ("encrypted_pkcs8", "the key is encrypted"),
        ("encrypted_traditional", "the key is encrypted"),
        ("cert_is_a_directory", "tls_server_config.cert_file ({cert}): is a directory"),
        ("huge_cert", "larger than"),
        ("junk_ca", "tls_server_config.client_ca_file ({ca}): holds no PEM certificates"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(pki, tmp_path, case, expected):
    cert, key = pki.server
    ca = pki.ca.cert_file
    junk = tmp_path / "junk.pem"
    junk.write_text("this is not PEM\n")
    if case == "missing_cert":
        cert = tmp_path / "nope.crt"
    elif case == "missing_key":
        key = tmp_path / "nope.key"
    elif case == "junk_cert":
        cert = junk
    elif case == "junk_key":
        key = junk
    elif case == "key_of_another":
        key = pki.client[1]
    elif case == "encrypted_pkcs8":
        key = encrypted(key, serialization.PrivateFormat.PKCS8, tmp_path / "enc8.key")
    elif case == "encrypted_traditional":
        key = encrypted(key, serialization.PrivateFormat.TraditionalOpenSSL, tmp_path / "enc.key")
    elif case == "cert_is_a_directory":
        cert = tmp_path
    elif case == "huge_cert":
        cert = tmp_path / "huge.crt"
        cert.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * (1024 * 1024 + 1))
    elif case == "junk_ca":
        ca = junk
    with pytest.raises(ConfigError) as e:
        build(cert, key, ca, "RequireAndVerifyClientCert")
    (line,) = e.value.problems
    assert expected.format(cert=cert, key=key, ca=ca) in line, line
    assert "PRIVATE KEY" not in line and "BEGIN" not in line


def test_a_stamp_changes_when_a_file_is_rewritten_or_replaced(tmp_path):
    a = tmp_path / "a.pem"
    a.write_text("one")
    first = stamp([str(a), str(tmp_path / "missing")])
    assert first[1] is None and stamp([str(a), str(tmp_path / "missing")]) == first
    replacement = tmp_path / "b.pem"
    replacement.write_text("two, longer")
    replacement.replace(a)  # as a Kubernetes Secret update or `mv` does
    assert stamp([str(a), str(tmp_path / "missing")]) != first

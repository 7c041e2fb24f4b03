"""Certificates made in the test, with the ``cryptography`` package: a CA, a server certificate
for 127.0.0.1 / localhost it signs, client certificates (one it signs, one a stranger CA signs),
written as PEM files; bcrypt hashes at the lowest cost (fast) and the web config files that name
them. Real X.509 and real bcrypt, nothing mocked: Python's ssl module and the guardian read them
as they would read an operator's."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TEST_COST = 4  # bcrypt's lowest cost: a check takes about a millisecond


def bcrypt_hash(password: str, cost: int = TEST_COST) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class Authority:
    """A CA that signs certificates into ``folder``."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        self.key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_file = folder / f"{name}.crt"
        _write_cert(self.cert, self.cert_file)

    def issue(self, cn: str, *, server: bool) -> tuple[Path, Path]:
        """A certificate for ``cn`` (server: 127.0.0.1 and localhost as SANs); (cert, key) files."""
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file, key_file = self.folder / f"{cn}.crt", self.folder / f"{cn}.key"
        _write_cert(cert, cert_file)
        _write_key(key, key_file)
        return cert_file, key_file


@dataclass
class Pki:
    """Everything a TLS test needs, in one folder."""

    folder: Path
    ca: Authority
    server: tuple[Path, Path]  # signed by ca, for 127.0.0.1 / localhost
    client: tuple[Path, Path]  # signed by ca
    stranger: tuple[Path, Path]  # a client certificate another CA signed

    @classmethod
    def make(cls, folder: Path) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        ca = Authority(folder, "test-ca")
        other = Authority(folder, "stranger-ca")
        return cls(
            folder,
            ca,
            ca.issue("guardian", server=True),
            ca.issue("prometheus", server=False),
            other.issue("intruder", server=False),
        )

    def tls_server_config(self, **extra: object) -> dict:
        cert, key = self.server
        return {"cert_file": str(cert), "key_file": str(key), **extra}

    def require_client_certs(self) -> dict:
        return self.tls_server_config(
            client_ca_file=str(self.ca.cert_file), client_auth_type="RequireAndVerifyClientCert"
        )


def write_web_config(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path

"""TLS of the guardian's HTTP listener, on Python's ``ssl`` module: the server context built from
files, the handshake of one accepted connection within a deadline, and the stamp of the files
(to see that one changed).

Reads: the certificate chain, its private key and the CA bundle of the client certificates (at
most ``MAX_PEM_BYTES`` each, checked to hold PEM of the right kind before OpenSSL loads them, so a
problem names the file at fault). Raises ``ConfigError`` with one line naming the key
(``tls_server_config.cert_file`` ...) and what is wrong; never a key's content. An encrypted key is
refused (there is nobody to type its passphrase); OpenSSL would otherwise prompt on the terminal.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Sequence

from vllm_guardian.errors import ConfigError
from vllm_guardian.config.web import read_capped

MAX_PEM_BYTES = 1024 * 1024  # a chain of a few certificates is a few KiB
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_PEM_MARK = {
    "cert_file": (b"-----BEGIN CERTIFICATE-----",),
    "client_ca_file": (b"-----BEGIN CERTIFICATE-----",),
    "key_file": (b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN RSA PRIVATE KEY-----", b"-----BEGIN EC PRIVATE KEY-----"),
}
_ENCRYPTED = (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", b"Proc-Type: 4,ENCRYPTED")


class _Encrypted(Exception):
    """OpenSSL asked for a passphrase."""


def _no_passphrase() -> bytes:
    raise _Encrypted


def _check_pem(key: str, path: str, where: str) -> None:
    """The file is readable and holds PEM of the kind ``key`` names; else a ``ConfigError``."""
    at = f"{where}.{key} ({path})"
    data = read_capped(path, MAX_PEM_BYTES, at, "PEM file")
    if key == "key_file" and any(m in data for m in _ENCRYPTED):
        raise ConfigError([f"{at}: the key is encrypted; the guardian needs it unencrypted (readable by root only)"])
    if not any(m in data for m in _PEM_MARK[key]):
        what = "PEM private key" if key == "key_file" else "PEM certificates"
        raise ConfigError([f"{at}: holds no {what}"])


def server_context(
    cert_file: str,
    key_file: str,
    client_ca_file: str | None,
    client_auth_type: str,
    min_version: str,
    max_version: str,
    where: str = "tls_server_config",
) -> ssl.SSLContext:
    """A server context: this certificate and key, TLS ``min_version``..``max_version``, client
    certificates per ``client_auth_type`` (verified against ``client_ca_file``), no renegotiation,
    no compression."""
    _check_pem("cert_file", cert_file, where)
    _check_pem("key_file", key_file, where)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = VERSIONS[min_version]
    ctx.maximum_version = VERSIONS[max_version]
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        ctx.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    except _Encrypted:
        raise ConfigError([f"{where}.key_file ({key_file}): the key is encrypted; it must be unencrypted"]) from None
    except ssl.SSLError as e:
        why = "the key does not match the certificate" if e.reason == "KEY_VALUES_MISMATCH" else _ssl_words(e)
        raise ConfigError([f"{where}: cert_file ({cert_file}) and key_file ({key_file}): {why}"]) from None
    except OSError as e:
        raise ConfigError([f"{where}: cert_file or key_file: cannot read: {e.strerror or e}"]) from None
    if client_ca_file:
        _check_pem("client_ca_file", client_ca_file, where)
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError([f"{where}.client_ca_file ({client_ca_file}): {_ssl_words(e)}"]) from None
    ctx.verify_mode = CLIENT_AUTH[client_auth_type]
    return ctx


def _ssl_words(e: OSError) -> str:
    reason = getattr(e, "reason", None)
    return str(reason).replace("_", " ").lower() if reason else (e.strerror or str(e))


def server_socket(ctx: ssl.SSLContext, sock: socket.socket) -> ssl.SSLSocket:
    """The server side of TLS over an accepted connection, before its handshake (no I/O here).
    ``sock`` is detached into the returned socket: from here on, use and close that one."""
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def finish_handshake(tls: ssl.SSLSocket, deadline: float) -> None:
    """The TLS handshake, finished by ``deadline`` (monotonic): CPython bounds the whole handshake
    by the socket's timeout (one deadline for all its reads), so a client sending its hello a
    byte at a time cannot hold it longer. Raises ``TimeoutError``, ``ssl.SSLError`` (plaintext, no
    or a bad client certificate, no common version) or ``OSError`` (the peer went away)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed before the TLS handshake")
    tls.settimeout(left)
    tls.do_handshake()


Stamp = tuple[tuple[int, int, int] | None, ...]


def stamp(paths: Sequence[str]) -> Stamp:
    """(inode, mtime ns, size) of each path, following symlinks (a Kubernetes Secret volume swaps a
    symlink), None for one that cannot be read: two stamps differ when a file changed."""
    out: list[tuple[int, int, int] | None] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)

"""Network addresses: the one ``host:port`` reader, and a free loopback port for tests and the sim."""

from __future__ import annotations

import socket


def parse_hostport(text: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:9464"`` for IPv6) → ``(host, port)``, port 1..65535.
    Raises ``ValueError`` saying what is wrong."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f'expected a "host:port" address (port 1..65535), got {text!r}')
    return host, int(port)


def is_hostport(text: str) -> bool:
    try:
        parse_hostport(text)
    except ValueError:
        return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's pick; another process may take it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])

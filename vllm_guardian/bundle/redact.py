"""Secrets out of what evidence writes: command lines and free text (summary, manifest, dumps).

Pure functions, no I/O. What is treated as a secret:

- the value of an option whose *name* says secret: ``--api-key X``,
  ``--api-key=X``, ``--hf-token X``, ``--password X``, ``-–db-secret=X``;
- ``NAME=value`` words whose name says secret (``HF_TOKEN=hf_x`` in an ``env …`` argv);
- the password in a URL's user-info (``redis://:pw@host`` → ``redis://:<redacted>@host``).

A name says secret when one of its words (split on ``-``/``_``/``.``) ends in
``token``, ``secret``, ``key``, ``keys``, ``password``, ``passwd`` or ``passphrase``,
or is ``pwd``, ``auth``, ``credential(s)`` or ``authorization``. Words, not
substrings: ``*token*`` as a substring would blank ``--tokenizer`` and
``--max-num-batched-tokens``, the very vLLM settings a person reading a bundle
needs, while ``--hf-token``, ``--auth-token`` and ``HF_TOKEN`` still match.
After a secret option given without ``=``, every following argument up to the
next option is redacted (``--api-key`` may take several keys).

The environment is never read by the guardian, so nothing here handles it.
"""

from __future__ import annotations

import re
from typing import Sequence

REDACTED = "<redacted>"

_SUFFIXES = ("token", "secret", "key", "keys", "password", "passwd", "passphrase")
_WORDS = frozenset({"pwd", "auth", "credential", "credentials", "authorization", "apikey"})
_SPLIT = re.compile(r"[-_.]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# In free text a value stops at whitespace, quotes, backslashes and markup, so a
# redaction inside a JSON string or an SVG attribute keeps the document well formed.
_VALUE = r"[^\s\"'\\<>&]+"
_TEXT_OPT_EQ = re.compile(r"(?P<opt>(?<![\w-])--?(?P<name>[A-Za-z][\w.-]*))=(?P<val>" + _VALUE + ")")
_TEXT_OPT_SP = re.compile(
    r"(?P<opt>(?<![\w-])--?(?P<name>[A-Za-z][\w.-]*))(?P<sp>[ \t]+)"
    r"(?P<val>(?!-)" + _VALUE + r"(?:[ \t]+(?!-)" + _VALUE + ")*)"
)
# ``name: value`` lines of a py-spy text dump with --locals (Arguments:/Locals: sections)
_TEXT_LOCAL = re.compile(r"(?m)^(?P<head>[ \t]+(?P<name>[A-Za-z_][\w]*): )(?P<val>.+)$")
_TEXT_ENV = re.compile(r"(?<![\w.-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>" + _VALUE + ")")
_URL_CRED = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"'<>]*:)(?P<pw>[^\s@/\"'<>]+)(?P<at>@)")


def is_secret_name(name: str) -> bool:
    """Does an option or variable name (``--hf-token``, ``API_KEY``) name a secret?"""
    words = [w for w in _SPLIT.split(name.lstrip("-").lower()) if w]
    return any(w in _WORDS or w.endswith(_SUFFIXES) for w in words)


def redact_url(text: str) -> str:
    """Passwords in ``scheme://user:password@host`` become ``<redacted>``."""
    return _URL_CRED.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def redact_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """A command line with every secret value replaced; options and positionals otherwise kept."""
    out: list[str] = []
    in_secret = False
    for arg in argv:
        if arg.startswith("-") and len(arg) > 1:
            in_secret = False
            name, eq, _value = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={REDACTED}")
                    continue
                in_secret = True
            out.append(redact_url(arg))
            continue
        if in_secret:
            out.append(REDACTED)
            continue
        name, eq, _value = arg.partition("=")
        if eq and _ENV_NAME.match(name) and is_secret_name(name):
            out.append(f"{name}={REDACTED}")
            continue
        out.append(redact_url(arg))
    return tuple(out)


def redact_text(text: str) -> str:
    """Free text (a summary, a py-spy text dump, a JSON document) with secret values replaced.

    Catches ``--name=value``, ``--name value``, ``NAME=value`` and URL passwords.
    Every word after a secret option up to the next option is redacted (``--api-key k1
    k2``), and so is the value of a ``name: value`` line whose name says secret (a local
    in a py-spy text dump).
    """

    def opt(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        if "sp" not in m.groupdict():
            return f"{m.group('opt')}={REDACTED}"
        values = len(m.group("val").split())  # --api-key k1 k2: every key
        return m.group("opt") + m.group("sp") + " ".join([REDACTED] * values)

    def local(m: re.Match[str]) -> str:
        return m.group("head") + REDACTED if is_secret_name(m.group("name")) else m.group(0)

    def env(m: re.Match[str]) -> str:
        return f"{m.group('name')}={REDACTED}" if is_secret_name(m.group("name")) else m.group(0)

    text = _TEXT_OPT_EQ.sub(opt, text)
    text = _TEXT_OPT_SP.sub(opt, text)
    text = _TEXT_ENV.sub(env, text)
    text = _TEXT_LOCAL.sub(local, text)
    return redact_url(text)

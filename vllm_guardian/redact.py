"""Secrets out of everything the guardian writes or shows: command lines and free text.

Pure functions, no I/O. What is treated as a secret, in free text (``redact_text``):

- a value given to a name that says secret, in every shape a log, a repr or a document
  writes it: ``--api-key X`` / ``--api-key=X`` (every value up to the next option),
  ``NAME=value`` / ``NAME="va lue"`` (an env line, ``export``), ``name: value``,
  ``"api_key": "X"`` (JSON), ``'api_key': ['X', 'Y']`` (vLLM's ``non-default args:``
  line, a Python dict or list), ``Namespace(api_key='X')``, ``Authorization: Bearer X``,
  ``password=X``; and the ``name: value`` lines of a py-spy text dump's locals; a quoted value
  with a Python string prefix is a value too (``api_key: b'X'``, ``Namespace(api_key=b'X')``,
  ``--api-key b'X'``: a key held as bytes, as a repr or a log prints it);
- ``Bearer X`` anywhere, and the password in a URL's user-info (``redis://:pw@host``);
- values whose own shape says secret, whatever names them: Hugging Face tokens (``hf_…``),
  ``sk-…`` keys, AWS access key ids (``AKIA…``/``ASIA…``), Google API keys (``AIza…``),
  GitHub and Slack tokens, JWTs (a Kubernetes service-account token) and PEM private keys.

A name says secret when one of its words (split on ``-``/``_``/``.``) ends in
``token``, ``secret``, ``key``, ``keys``, ``password``, ``passwd`` or ``passphrase``,
or is ``pwd``, ``auth``, ``credential(s)``, ``authorization``, ``apikey`` or ``sig``.
Words, not substrings: ``*token*`` as a substring would blank ``--tokenizer`` and
``--max-num-batched-tokens``, the settings a person reading a bundle needs.

Linear time: every pattern can start only where a word starts (a look-behind refuses a
start inside a run of name characters) and its repeated parts are bounded or stop at a
delimiter, so no input makes the regex engine backtrack over what it already read (a
256 KiB log line takes milliseconds; the pattern it replaced took minutes). A redaction
inside a JSON string keeps the document well formed (values stop at quotes and
backslashes; a bare JSON value becomes a quoted ``"<redacted>"``).
"""

from __future__ import annotations

import re
from typing import Sequence

REDACTED = "<redacted>"

_SUFFIXES = ("token", "secret", "key", "keys", "password", "passwd", "passphrase")
_WORDS = frozenset({"pwd", "auth", "credential", "credentials", "authorization", "apikey", "sig"})
_SPLIT = re.compile(r"[-_.]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_NOT_SECRETS = frozenset({"null", "none", "true", "false", "nil"})

# A bare value stops at whitespace, quotes, backslashes, markup and separators.
_BARE = r"[^\s\"'\\<>&,;(){}\[\]]+"
_DQ = r'"(?:[^"\\\n]|\\.){0,4096}"'
_SQ = r"'(?:[^'\\\n]|\\.){0,4096}'"
_PREFIX = r"(?:[bB][rR]?|[rR][bB]?|[uU])?"  # b'…' (bytes), rb'…', u'…': a Python literal's prefix
_STRING = _PREFIX + "(?:" + _DQ + "|" + _SQ + ")"
_LIST = r"\[[^\[\]\n]{0,8192}\]"
_SCHEME = r"(?:(?i:bearer|basic|token|digest)[ \t]+)?"
# name <sep> value: ``NAME=v``, ``--name=v``, ``"name": "v"``, ``'name': ['v']``, ``name: v``.
# The head is bounded; the value is matched only after a secret name, and then consumed.
_KV_HEAD = re.compile(
    r"(?<![\w.-])(?P<q>[\"']?)(?P<dash>--?)?(?P<name>[A-Za-z_][\w.-]{0,79})(?P=q)"
    r"(?P<sep>[ \t]{0,8}[:=][ \t]{0,8})"
)
_KV_VALUE = re.compile(_STRING + "|" + _LIST + "|" + _SCHEME + _BARE)
_QUOTED = re.compile(_DQ + "|" + _SQ)
_QUOTED_PFX = re.compile(r"(?P<p>[bBrRuU]{0,2})(?P<q>[\"'])")
# ``--name v1 v2``: every value up to the next option; a value is a word or a quoted string
_OPT_VALUE = r"(?!-)(?:" + _STRING + r"|[^\s\"'\\<>&]+)"
_OPT_VALUES = re.compile(_OPT_VALUE)
_OPT_SP = re.compile(
    r"(?<![\w-])(?P<opt>--?(?P<name>[A-Za-z][\w.-]{0,79}))(?P<sp>[ \t]+)"
    r"(?P<val>" + _OPT_VALUE + r"(?:[ \t]+" + _OPT_VALUE + r")*)"
)
# ``name: value`` lines of a py-spy text dump with --locals (Arguments:/Locals: sections)
_LOCAL = re.compile(r"(?m)^(?P<head>[ \t]+(?P<name>[A-Za-z_]\w{0,79}): )(?P<val>[^\n]+)$")
_BEARER = re.compile(r"(?<![\w-])(?P<head>(?i:bearer)[ \t]+)(?P<tok>[A-Za-z0-9._~+/=-]{6,})")
_URL_CRED = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/@\"'<>]{0,256}:)"
    r"(?P<pw>[^\s@\"'<>]{1,1024})(?P<at>@)"  # a "/" too: generated passwords hold one
)
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"hf_[A-Za-z0-9]{20,}"
    r"|sk-[A-Za-z0-9_-]{12,}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}(?![0-9A-Z])"
    r"|AIza[0-9A-Za-z_-]{30,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r")"
)
_PEM = re.compile(r"(?P<head>-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----)(?:[A-Za-z0-9+/=\s]|\\n){1,65536}")


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
            out.append(redact_text(arg))
            continue
        if in_secret:
            out.append(REDACTED)
            continue
        name, eq, _value = arg.partition("=")
        if eq and _ENV_NAME.match(name) and is_secret_name(name):
            out.append(f"{name}={REDACTED}")
            continue
        out.append(redact_text(arg))
    return tuple(out)


def _value(val: str, json_bare: bool) -> str:
    """The redacted form of one value as it was written: quotes, a string prefix (``b'…'``) and
    list brackets kept."""
    quoted = _QUOTED_PFX.match(val)
    if quoted is not None:
        q = quoted.group("q")
        return quoted.group("p") + q + REDACTED + q
    if val[:1] == "[":
        return _QUOTED.sub(lambda q: q.group(0)[0] + REDACTED + q.group(0)[0], val)
    scheme, _, token = val.rpartition(" ") if " " in val or "\t" in val else ("", "", val)
    if token.lower() in _NOT_SECRETS:
        return val
    if scheme:
        return val[: len(val) - len(token)] + REDACTED
    return f'"{REDACTED}"' if json_bare else REDACTED


def _kv(val: str, json_value: bool) -> str:
    if val[:1] == "[" and "'" not in val and '"' not in val:  # a list of bare words: [k1, k2]
        return "[" + REDACTED + "]"
    return _value(val, json_bare=json_value)


def _sub_kv(text: str) -> str:
    """Each ``name<sep>`` head found; where the name says secret, the value after it is
    matched there and replaced (and the search goes on after it); after any other name the
    search goes on right after its separator, so a secret inside its value (a JSON string
    holding a command line) is still found. Every character is read a bounded number of times."""
    out: list[str] = []
    pos = 0
    search, value = _KV_HEAD.search, _KV_VALUE.match
    m = search(text, 0)
    while m is not None:
        end = m.end()
        if is_secret_name(m.group("name")):
            v = value(text, end)
            if v is not None:
                out.append(text[pos:end])
                out.append(_kv(v.group(0), m.group("q") == '"' and ":" in m.group("sep")))
                pos = end = v.end()
        m = search(text, end)
    out.append(text[pos:])
    return "".join(out)


def _opt(m: re.Match[str]) -> str:
    if not is_secret_name(m.group("name")):
        return m.group(0)
    values = len(_OPT_VALUES.findall(m.group("val")))  # --api-key k1 k2: every key
    return m.group("opt") + m.group("sp") + " ".join([REDACTED] * values)


def _local(m: re.Match[str]) -> str:
    return m.group("head") + REDACTED if is_secret_name(m.group("name")) else m.group(0)


def redact_text(text: str) -> str:
    """Free text (a log line, a summary, a py-spy dump, a JSON document) with every secret
    value replaced by ``<redacted>``; see the module docstring for the shapes. Linear time."""
    if not text:
        return text
    text = _PEM.sub(lambda m: m.group("head") + REDACTED, text)
    text = _SHAPES.sub(REDACTED, text)
    text = _OPT_SP.sub(_opt, text)  # before key=value: '--api-key =x' is an option's value, not 'key = x'
    text = _sub_kv(text)
    text = _BEARER.sub(lambda m: m.group("head") + REDACTED, text)
    text = _LOCAL.sub(_local, text)
    return redact_url(text)

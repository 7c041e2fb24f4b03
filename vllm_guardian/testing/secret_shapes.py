"""The shapes a secret is written in, shared by the redaction tests, the output-path tests and
the hostile-neighbour chaos tier: ``{s}`` is where the secret goes."""

from __future__ import annotations

from hypothesis import strategies as st

# written next to a name that says secret (or a scheme that does): any value must go
NAMED_SHAPES: tuple[str, ...] = (
    "(APIServer pid=1) INFO 12-02 non-default args: {{'model': 'm', 'api_key': ['{s}'], 'port': 8000}}",
    "non-default args: {{'api_key': ['{s}', '{s}x'], 'host': '0.0.0.0'}}",
    "Namespace(host=None, port=8000, api_key='{s}', model='m')",
    "Namespace(api_key=['{s}'])",
    "Authorization: Bearer {s}",
    "headers={{'Authorization': 'Bearer {s}'}}",
    '{{"api_key": "{s}", "model": "m"}}',
    '{{"hf_token":"{s}"}}',
    "VLLM_API_KEY={s}",
    'HF_TOKEN="{s}"',
    "export HUGGING_FACE_HUB_TOKEN='{s}'",
    "AWS_SECRET_ACCESS_KEY={s}",
    "aws_secret_access_key = {s}",
    "password={s}",
    "db password: {s}",
    "--api-key {s} --port 8000",
    "--api-key={s}",
    "vllm serve m --api-key {s} {s}2",
    "redis://user:{s}@10.0.0.1:6379/0",
    "curl -H 'Authorization: Bearer {s}' http://x",
    "token: {s}",
    "AccountKey={s};EndpointSuffix=core.windows.net",
    "client_secret={s}&grant_type=x",
    "        api_key: '{s}'",
    # a key held as bytes, as a repr, a py-spy local or a log prints it
    "Namespace(host=None, api_key=b'{s}', port=8000)",
    "non-default args: {{'api_key': b'{s}', 'port': 8000}}",
    "        api_key: b'{s}'",
    "VLLM_API_KEY=b'{s}'",
    "vllm serve m --api-key b'{s}' --port 8000",
    "vllm serve m --api-key '{s}' --port 8000",
)

# a secret format recognised by itself: (prefix, alphabet, least and most characters after it)
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SELF_EVIDENT: tuple[tuple[str, str, int, int], ...] = (
    ("hf_", _ALNUM, 34, 40),
    ("sk-", _ALNUM + "-_", 20, 60),
    ("AKIA", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 16, 16),
    ("AIza", _ALNUM + "-_", 35, 35),
    ("ghp_", _ALNUM, 36, 40),
    ("xoxb-", _ALNUM + "-", 24, 50),
)

SHAPES: tuple[str, ...] = NAMED_SHAPES + (
    "Bearer {s} was refused",
    "-----BEGIN RSA PRIVATE KEY-----\\n{s}\\n-----END RSA PRIVATE KEY-----",
)


def secrets() -> st.SearchStrategy[str]:
    """Secrets as people make them: 8-64 characters of what keys and passwords are made of."""
    return st.text(alphabet=_ALNUM + "-_+/=.~", min_size=8, max_size=64).filter(
        lambda s: s.lower() not in ("null", "none", "true", "false", "nil") and not s.startswith("-")
    )

"""Redaction holds for every shape a secret is written in, for any secret, in linear time.

The corpus is shared: ``SHAPES`` (a template with ``{s}`` where the secret goes) is what the
output-path tests (tests/component/test_secrets_output_paths.py) and the hostile-neighbour chaos
tier feed through the guardian's real outputs.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vllm_guardian.redact import REDACTED, redact_text
from vllm_guardian.testing.secret_shapes import NAMED_SHAPES, SELF_EVIDENT, SHAPES, secrets

R = REDACTED


@pytest.mark.parametrize("shape", SHAPES, ids=[s[:40] for s in SHAPES])
def test_a_secret_in_any_known_shape_is_redacted(shape):
    secret = "s3cr3t-Value_0123456789"
    out = redact_text(shape.format(s=secret))
    assert secret not in out and R in out


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "INFO non-default args: {'model': 'Qwen/Qwen3-0.6B', 'api_key': ['sk-a1', 'sk-b2'], 'port': 8000}",
            f"INFO non-default args: {{'model': 'Qwen/Qwen3-0.6B', 'api_key': ['{R}', '{R}'], 'port': 8000}}",
        ),
        ("Namespace(host=None, api_key='k1', port=8000)", f"Namespace(host=None, api_key='{R}', port=8000)"),
        ("Authorization: Bearer abc.def-123", f"Authorization: Bearer {R}"),
        ('{"api_key": "k1", "model": "m"}', f'{{"api_key": "{R}", "model": "m"}}'),
        ('{"api_key": 12345678, "n": 1}', f'{{"api_key": "{R}", "n": 1}}'),
        ('{"api_key": null}', '{"api_key": null}'),
        ('HF_TOKEN="a b c" PORT=8000', f'HF_TOKEN="{R}" PORT=8000'),
        ("export AWS_SECRET_ACCESS_KEY='x/y+z'", f"export AWS_SECRET_ACCESS_KEY='{R}'"),
        ("login password=hunter2 user=bob", f"login password={R} user=bob"),
        (
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc+/=;x",
            f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={R};x",
        ),
        (
            "url https://st.blob.core.windows.net/c?sv=2024&sig=abcdef",
            f"url https://st.blob.core.windows.net/c?sv=2024&sig={R}",
        ),
        (
            "--tokenizer gpt2 --max-num-batched-tokens 8192 kv_cache_dtype=auto",
            "--tokenizer gpt2 --max-num-batched-tokens 8192 kv_cache_dtype=auto",
        ),
        ("max_tokens: 16, tokenizer_mode: auto", "max_tokens: 16, tokenizer_mode: auto"),
    ],
)
def test_what_is_redacted_and_what_is_kept_for_the_reader(text, expected):
    assert redact_text(text) == expected


def test_a_json_document_stays_json_whatever_it_holds():
    doc = {
        "cmd": "vllm serve m --api-key sk-abcdefghijklmnop",
        "api_key": ["k1", "k2"],
        "token": 7,
        "auth": {"password": "p"},
        "log": "Authorization: Bearer zzzzzzzz",
    }
    out = redact_text(json.dumps(doc))
    back = json.loads(out)
    assert "sk-abcdefghijklmnop" not in out and "zzzzzzzz" not in out and '"p"' not in out
    assert back["cmd"].startswith("vllm serve m --api-key")


@settings(max_examples=150, deadline=None, database=None)
@given(secret=secrets(), shape=st.sampled_from(NAMED_SHAPES), left=st.text(max_size=40), right=st.text(max_size=40))
def test_no_generated_secret_survives_any_named_shape_in_any_surrounding_text(secret, shape, left, right):
    assume(secret not in left + right + shape.replace("{s}", ""))  # 'password' in 'password={s}' is no leak
    text = left + " " + shape.format(s=secret) + "\n" + right
    assert secret not in redact_text(text)


@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data(), shape=st.sampled_from(SELF_EVIDENT))
def test_no_generated_token_of_a_known_format_survives_even_unnamed(data, shape):
    prefix, alphabet, least, most = shape
    token = prefix + data.draw(st.text(alphabet=alphabet, min_size=least, max_size=most))
    assert token not in redact_text(f"x {token} y")


def _per_char(text: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        redact_text(text)
        best = min(best, time.perf_counter() - t0)
    return best / len(text)


@pytest.mark.parametrize(
    "unit",
    [
        "a" * 64 + "://",  # the old URL-credential pattern: quadratic in a run of scheme characters
        "x://:" + "a" * 30,
        'k="' + "v" * 40,
        "'api_key': [" + "'k', " * 8,
        "--api-key " + "v " * 20,
        "Bearer " + "b" * 50 + " ",
        "-----BEGIN PRIVATE KEY-----" + "A" * 30,
        "sk-" + "s" * 40 + "-",
        "eyJ" + "a" * 20 + ".",
        '"name": "' + '\\"' * 20,
        "aaaa" * 20,
    ],
)
def test_redaction_time_grows_linearly_with_the_input(unit):
    """Per character, a line 32x longer costs about the same (a quadratic pattern: 32x more):
    a ratio, not a wall-clock limit; the margin absorbs cache effects and a loaded machine."""
    small = unit * (8 * 1024 // len(unit))
    big = unit * (256 * 1024 // len(unit))
    ratio = _per_char(big) / _per_char(small)
    assert ratio < 8, f"per-character cost grew {ratio:.1f}x from {len(small)} to {len(big)} characters"

"""Secrets never reach a bundle: what counts as a secret, and what is kept for the reader."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.redact import REDACTED, is_secret_name, redact_argv, redact_text, redact_url

R = REDACTED


@pytest.mark.parametrize(
    "name",
    [
        "--api-key",
        "--hf-token",
        "--password",
        "--db-secret",
        "--auth-token",
        "--ssl-key",
        "--private_key",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "--passwd",
        "--pwd",
        "--client-secret",
        "--hftoken",
        "--api-keys",
        "--credentials",
        "--secretkey",
        "--passphrase",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "--tokenizer",
        "--tokenizer-mode",
        "--max-num-batched-tokens",
        "--port",
        "--model",
        "--ssl-keyfile",
        "--keyboard",
        "--served-model-name",
        "PATH",
        "--kv-cache-dtype",
        "",
    ],
)
def test_names_that_are_not_secrets(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["vllm", "serve", "m", "--api-key", "sk-1"], ["vllm", "serve", "m", "--api-key", R]),
        (["vllm", "serve", "--api-key=sk-1", "--port", "8000"], ["vllm", "serve", f"--api-key={R}", "--port", "8000"]),
        (["x", "--hf-token", "hf_1", "--tokenizer", "t"], ["x", "--hf-token", R, "--tokenizer", "t"]),
        (["x", "--password", "p"], ["x", "--password", R]),
        (["x", "--my-secret=s", "--db-token", "t"], ["x", f"--my-secret={R}", "--db-token", R]),
        (["x", "--api-key", "k1", "k2", "--port", "1"], ["x", "--api-key", R, R, "--port", "1"]),
        (["env", "HF_TOKEN=hf_1", "PORT=8000", "python"], ["env", f"HF_TOKEN={R}", "PORT=8000", "python"]),
        (["x", "--redis", "redis://u:pw@h:6379/0"], ["x", "--redis", f"redis://u:{R}@h:6379/0"]),
        (["x", "--url=https://:pw@h"], ["x", f"--url=https://:{R}@h"]),
        (["x", "--api-key"], ["x", "--api-key"]),  # no value: nothing to hide
        (
            ["x", "--max-num-batched-tokens", "8192", "--tokenizer", "tok"],
            ["x", "--max-num-batched-tokens", "8192", "--tokenizer", "tok"],
        ),
        (["VLLM::EngineCore"], ["VLLM::EngineCore"]),
        ([], []),
    ],
)
def test_redact_argv(argv, expected):
    assert redact_argv(argv) == tuple(expected)


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Process 9: python -m vllm --api-key sk-1 --port 8000",
            f"Process 9: python -m vllm --api-key {R} --port 8000",
        ),
        ("cmd --hf-token=hf_1", f"cmd --hf-token={R}"),
        ("HF_TOKEN=hf_1 vllm serve", f"HF_TOKEN={R} vllm serve"),
        ("redis://:pw@10.0.0.1:6379", f"redis://:{R}@10.0.0.1:6379"),
        ("--tokenizer gpt2 --max-num-batched-tokens 8192", "--tokenizer gpt2 --max-num-batched-tokens 8192"),
        ("--api-key --port 1", "--api-key --port 1"),  # the next word is an option, not a value
        ("cpu_ratio=0.99 tid=42", "cpu_ratio=0.99 tid=42"),
        ("", ""),
    ],
)
def test_redact_text(text, expected):
    assert redact_text(text) == expected


def test_redacting_a_json_document_keeps_it_json():
    doc = {"cmdline": "python -m vllm --api-key=sk-1 --password hunter2", "url": "redis://:pw@h"}
    out = json.loads(redact_text(json.dumps(doc)))
    assert out == {"cmdline": f"python -m vllm --api-key={R} --password {R}", "url": f"redis://:{R}@h"}


def test_a_url_without_a_password_is_left_alone():
    assert redact_url("http://127.0.0.1:8000/v1/models") == "http://127.0.0.1:8000/v1/models"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("api_key: b'k3y-Zq7'", f"api_key: b'{R}'"),
        ("Namespace(api_key=b'k3y-Zq7', port=8000)", f"Namespace(api_key=b'{R}', port=8000)"),
        ("{'api_key': b'k3y-Zq7', 'port': 8000}", f"{{'api_key': b'{R}', 'port': 8000}}"),
        ("{'api_key': [b'k3y-Zq7', b'k3y-Zq8']}", f"{{'api_key': [b'{R}', b'{R}']}}"),
        ('"api_key": b"k3y-Zq7"', f'"api_key": b"{R}"'),
        ("VLLM_API_KEY=b'k3y-Zq7'", f"VLLM_API_KEY=b'{R}'"),
        ("api_key=rb'k3y-Zq7'", f"api_key=rb'{R}'"),
        ("api_key=B'k3y-Zq7'", f"api_key=B'{R}'"),
        ("--api-key b'k3y-Zq7' b'k3y-Zq8' --port 1", f"--api-key {R} {R} --port 1"),
        ("--api-key 'k3y-Zq7' --port 1", f"--api-key {R} --port 1"),
        ("--model 'my model' --tokenizer b'gpt2'", "--model 'my model' --tokenizer b'gpt2'"),  # not secrets
        ("token: bob", f"token: {R}"),  # a bare value starting with b is still a bare value
    ],
)
def test_a_key_held_as_bytes_or_quoted_after_an_option_is_redacted(text, expected):
    """Defect E16: ``api_key: b'…'`` kept the key (the bare value stopped at the quote after b)."""
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-c", "serve(api_key=b'k3y-Zq7')"],
        ["vllm", "--config={'api_key': b'k3y-Zq7'}"],
        ["env", "VLLM_API_KEY=b'k3y-Zq7'", "vllm"],
    ],
)
def test_a_bytes_key_in_an_argument_is_redacted(argv):
    assert not any("k3y-Zq7" in a for a in redact_argv(argv))

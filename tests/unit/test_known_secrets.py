"""The known-value scrubber (vllm_guardian/bundle/known_secrets.py): every value a source holds
now, in each form it is written in (as is, JSON-escaped, HTML-escaped), becomes ``<redacted>``;
a rotated value is covered from the next scrub on; a value too short to tell from ordinary text is
left to the shape rules; a failing source never breaks a write. And the guardian's log handler
(surface/logs.py) passes every formatted line, a traceback included, through it in each format."""

from __future__ import annotations

import html
import io
import json
import logging

import pytest

from vllm_guardian.bundle.known_secrets import MIN_LENGTH, KnownSecrets
from vllm_guardian.redact import REDACTED as R
from vllm_guardian.surface.logs import FORMATS, scrub_log_lines, setup_logging

KEY = "Zq7Kx93hPlWm"
ODD = 'p&ss"w<rd\\9'  # a password with what JSON and HTML escape


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"refused a client presenting {KEY}", f"refused a client presenting {R}"),
        (f"{KEY}{KEY}", f"{R}{R}"),
        (f"k = '{KEY}'", f"k = '{R}'"),
        (json.dumps({"detail": f"x {ODD} y"}), json.dumps({"detail": f"x {R} y"})),
        (html.escape(f"<td>{ODD}</td>"), html.escape("<td>") + R + html.escape("</td>")),
        (f"auth {ODD}", f"auth {R}"),
        ("nothing held here", "nothing held here"),
        ("", ""),
    ],
)
def test_every_form_of_a_held_value_is_scrubbed(text, expected):
    assert KnownSecrets([lambda: [KEY], lambda: [ODD.encode()]]).scrub(text) == expected


def test_a_rotated_value_is_covered_from_the_next_scrub_on():
    held = ["first-key-000"]
    known = KnownSecrets([lambda: held])
    assert known.scrub("first-key-000 second-key-000") == f"{R} second-key-000"
    held[:] = ["second-key-000"]
    assert known.scrub("first-key-000 second-key-000") == f"first-key-000 {R}"


def test_a_value_too_short_to_tell_from_text_is_left_to_the_shape_rules():
    short = "x" * (MIN_LENGTH - 1)
    assert KnownSecrets([lambda: [short, None, "", "   "]]).scrub(f"port {short} 8000") == f"port {short} 8000"


def test_a_failing_source_is_skipped_and_the_others_still_scrub():
    def broken():
        raise RuntimeError("the keys are being reloaded")

    assert KnownSecrets([broken, lambda: [KEY]]).scrub(f"a {KEY}") == f"a {R}"


def test_a_document_is_scrubbed_in_every_key_and_string():
    doc = {"summary": f"refused {KEY}", KEY: [1, f"{KEY}!", {"n": 2.5}], "ok": True}
    assert KnownSecrets([lambda: [KEY]]).scrub_doc(doc) == {
        "summary": f"refused {R}",
        R: [1, f"{R}!", {"n": 2.5}],
        "ok": True,
    }


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_guardian_log_carries_no_held_value_in_any_format(fmt, restore_root_logger):
    """Defect E16: nothing scrubbed the log with the values the guardian holds."""
    out = io.StringIO()
    setup_logging(fmt, "info", stream=out, environ={})
    assert scrub_log_lines(KnownSecrets([lambda: [KEY, ODD]]).scrub)
    log = logging.getLogger("guardian.test")
    log.warning("a client presented %s", KEY)
    log.warning("redis said %s", ODD)
    try:
        raise ValueError(f"Invalid header value b'Bearer {KEY}'")
    except ValueError:
        log.exception("the request failed")
    text = out.getvalue()
    assert KEY not in text and ODD not in text and json.dumps(ODD)[1:-1] not in text
    assert text.count(R) >= 3 and "Traceback" in text.replace("\\n", "\n")


def test_installing_the_scrub_twice_replaces_it(restore_root_logger):
    out = io.StringIO()
    setup_logging("text", "info", stream=out, environ={})
    scrub_log_lines(KnownSecrets([lambda: ["old-value-1"]]).scrub)
    scrub_log_lines(KnownSecrets([lambda: ["new-value-2"]]).scrub)
    logging.getLogger("guardian.test").warning("old-value-1 new-value-2")
    assert out.getvalue().rstrip().endswith(f"old-value-1 {R}")


def test_the_guardian_knows_its_redis_password_kubernetes_token_and_trust_keys(tmp_path):
    """What the runtime hands the scrubber (loop/assemble.py, ``known_secrets``), each from where it lives."""
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.gates.trust import KeyRing, Keys
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.loop.assemble import known_secrets
    from vllm_guardian.seams import Seams
    from vllm_guardian.sinks.redis_conn import RedisConnection
    from vllm_guardian.testing.clock import FakeClock
    from vllm_guardian.testing.fake_control import FakeControl
    from vllm_guardian.testing.fake_http import FakeHttp
    from vllm_guardian.testing.fake_runner import FakeRunner

    alerts = parse_config(
        {"alerts": {"redis_url": "redis://:url%2Dpass-123@127.0.0.1:1/0", "password_env": "G_PW"}}
    ).alerts
    redis = RedisConnection.from_config(alerts, tmp_path, environ={"G_PW": "env-pass-456\n"})  # no connection made
    kube = KubeClient("https://k8s.example:6443", "kube-tok-789\n", None, "n")
    seams = Seams(FakeClock(), None, FakeHttp({}), FakeRunner(), FakeControl(set()))  # type: ignore[arg-type]
    known = known_secrets(seams, redis, KeyRing.fixed(Keys({"gw": b"trust-key-000"}, "gw")), kube)
    text = "url-pass-123 env-pass-456 kube-tok-789 trust-key-000"
    assert known.scrub(text) == f"{R} {R} {R} {R}"

"""The CLI around the web config: ``guardian healthz`` answers what /healthz would over the control
socket (the liveness probe when the listener asks for credentials), and ``guardian check-config``
reads the web config and its certificates as ``guardian run`` does, naming the key of a problem;
``guardian status`` says loudly when a web config reload was refused."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.certs import Pki, bcrypt_hash, write_web_config
from vllm_guardian.cli.main import main
from vllm_guardian.surface.control_socket import ControlSocket
from vllm_guardian.surface.http_listener import LastTick, healthz_answer
from vllm_guardian.testing.clock import FakeClock


@pytest.fixture
def daemon_socket(tmp_path):
    """A control socket answering ``healthz`` as the runtime wires it, over a fake clock."""
    clock = FakeClock()
    beat = LastTick(clock.monotonic)
    sock = ControlSocket(str(tmp_path / "g.sock"), {"healthz": lambda req: healthz_answer(beat.age(), 3.0)[1]})
    sock.start()
    try:
        yield sock.path, beat, clock
    finally:
        sock.stop()


@pytest.mark.parametrize("age, code, ok", [(None, 1, False), (0.5, 0, True), (3.0, 1, False), (60.0, 1, False)])
def test_healthz_exits_0_only_while_the_loop_ticks(daemon_socket, capsys, age, code, ok):
    path, beat, clock = daemon_socket
    if age is not None:
        beat.beat()
        clock.advance(age)
    assert main(["healthz", "--socket", path]) == code
    assert json.loads(capsys.readouterr().out)["ok"] is ok


def test_healthz_without_a_running_guardian_says_so_and_exits_1(tmp_path, capsys):
    assert main(["healthz", "--socket", str(tmp_path / "nobody.sock")]) == 1
    assert "not reachable" in capsys.readouterr().err


def config_with_web(tmp_path, web: dict) -> str:
    path = tmp_path / "g.yaml"
    web_file = write_web_config(tmp_path / "web.yml", web)
    cfg = {"state_dir": str(tmp_path / "state"), "api": {"http": "127.0.0.1:9464", "web_config_file": str(web_file)}}
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_check_config_reads_the_web_config_and_its_certificates(tmp_path, capsys):
    pki = Pki.make(tmp_path / "pki")
    secret = bcrypt_hash("pw")
    cfg = config_with_web(tmp_path, {"tls_server_config": pki.tls_server_config(), "basic_auth_users": {"p": secret}})
    assert main(["check-config", "-c", cfg]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["api"]["web_config_file"] == str(tmp_path / "web.yml") and secret not in out


@pytest.mark.parametrize(
    "web, expected",
    [
        ({"basic_auth_users": {"p": "hunter2-typed-as-is"}}, "basic_auth_users.p: expected a bcrypt hash"),
        ({"tls_server_config": {"cert_file": "/no.crt", "key_file": "/no.key"}}, "cert_file (/no.crt): no such file"),
    ],
)
def test_check_config_names_a_web_config_problem_and_exits_2(tmp_path, capsys, web, expected):
    assert main(["check-config", "-c", config_with_web(tmp_path, web)]) == 2
    err = capsys.readouterr().err
    assert f"api.web_config_file ({tmp_path / 'web.yml'})" in err and expected in err and "hunter2" not in err


def test_status_says_loudly_that_a_web_config_reload_was_refused(tmp_path, capsys):
    doc = {
        "node": "gpu-1",
        "version": "9.9",
        "http": {
            "scheme": "https",
            "web_config": {"file": "/etc/guardian/web.yml", "last_reload_ok": False, "last_error": "YAML syntax error"},
        },
    }
    sock = ControlSocket(str(tmp_path / "g.sock"), {"status": lambda req: doc})
    sock.start()
    try:
        assert main(["status", "--socket", sock.path]) == 0
    finally:
        sock.stop()
    assert (
        "WEB CONFIG RELOAD REFUSED (/etc/guardian/web.yml), the running one is kept: YAML syntax error"
        in capsys.readouterr().out
    )


def test_run_with_a_bad_web_config_stops_before_anything_listens(tmp_path, capsys):
    cfg = config_with_web(tmp_path, {"basic_auth_users": {"p": "typed-in-clear"}})
    assert main(["run", "-c", cfg]) == 2
    assert "basic_auth_users.p: expected a bcrypt hash" in capsys.readouterr().err
    assert not (tmp_path / "state" / "redis").exists()  # nothing was started (no embedded Redis left behind)

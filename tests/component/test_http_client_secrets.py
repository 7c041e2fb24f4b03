"""The real HTTP client never echoes what it was asked to send (a header value holding a key)."""

from __future__ import annotations

import socket

import pytest

from vllm_guardian.host.http import HttpError, StdlibHttpClient

SECRET = "sk-live-9f8e7d6c5b4a3210"


@pytest.fixture
def listening_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("value", [f"Bearer {SECRET}\n", f"Bearer {SECRET}\r\nX-Injected: 1"])
def test_an_unsendable_header_is_an_http_error_that_never_quotes_its_value(listening_port, value):
    with pytest.raises(HttpError) as caught:
        StdlibHttpClient().request(
            "GET", f"http://127.0.0.1:{listening_port}/v1/models", 2.0, headers={"Authorization": value}
        )
    err = caught.value
    assert err.reason == "error"
    assert SECRET not in str(err) and SECRET not in err.detail and SECRET not in repr(err)
    assert err.__cause__ is None and err.__suppress_context__  # the ValueError (which quotes it) is not chained

"""The real HTTP client keeps one connection per server alive between calls, and what a
server says about a call is the same as on a fresh connection: a closed, timed-out or
vanished connection is never reused, a dead server is still ``refused``, a hung one
``timeout``, and a late answer is never read as the next call's."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from vllm_guardian.host.http import HttpError, StdlibHttpClient

# what the server does with request number ``req`` (0-based) on connection number ``conn``
ANSWER, CLOSE, HANG = "answer", "close", "hang"
SAYS_CLOSE = "answer saying Connection: close (the socket left open)"
THEN_DROP = "answer, then close the connection (an idle timeout)"
THEN_JUNK = "answer, then bytes nobody asked for"


class ScriptedServer:
    """A loopback HTTP/1.1 server that numbers its connections and answers each request with
    ``"<connection>:<request>"``, or does what ``script(conn, req)`` says instead."""

    def __init__(self, script: Callable[[int, int], str] = lambda c, r: ANSWER, hang_s: float = 2.0) -> None:
        self.script = script
        self.hang_s = hang_s
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            n = self.connections
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        buf = b""
        req = 0
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = conn.recv(4096)
                    except OSError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                _, _, buf = buf.partition(b"\r\n\r\n")
                what = self.script(n, req)
                body = f"{n}:{req}".encode()
                req += 1
                if what == CLOSE:
                    return
                if what == HANG:
                    time.sleep(self.hang_s)
                extra = b"Connection: close\r\n" if what == SAYS_CLOSE else b""
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body))
                    if what == THEN_JUNK:
                        time.sleep(0.05)  # after the client has read its answer
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
                except OSError:
                    return
                if what == THEN_DROP:
                    return

    def close(self) -> None:
        """Gone as a dead server is: nothing listens (connections refused), every connection closed."""
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), which holds the socket
        except OSError:
            pass
        self.sock.close()
        for c in self._open:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


@pytest.fixture
def serve():
    made: list[ScriptedServer] = []

    def make(script: Callable[[int, int], str] = lambda c, r: ANSWER, hang_s: float = 2.0) -> ScriptedServer:
        made.append(ScriptedServer(script, hang_s))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _get(client: StdlibHttpClient, server: ScriptedServer, timeout: float = 2.0) -> str:
    return client.request("GET", server.url + "/health", timeout).text


def test_calls_to_one_server_share_one_kept_connection(serve):
    s = serve()
    client = StdlibHttpClient()
    assert [_get(client, s) for _ in range(3)] == ["0:0", "0:1", "0:2"]
    assert s.connections == 1


def test_each_server_has_its_own_kept_connection(serve):
    a, b = serve(), serve()
    client = StdlibHttpClient()
    assert [_get(client, a), _get(client, b), _get(client, a), _get(client, b)] == ["0:0", "0:0", "0:1", "0:1"]
    assert (a.connections, b.connections) == (1, 1)


@pytest.mark.parametrize("first", [SAYS_CLOSE, THEN_DROP, THEN_JUNK])
def test_a_connection_the_server_closed_or_wrote_to_is_not_reused_and_the_next_call_is_answered(serve, first):
    s = serve(lambda c, r: first if c == 0 else ANSWER)
    client = StdlibHttpClient()
    assert _get(client, s) == "0:0"
    time.sleep(0.1)  # what the server sent after its answer (a FIN, bytes) has arrived
    assert _get(client, s) == "1:0"
    assert s.connections == 2


def test_a_kept_connection_closed_as_the_request_arrives_is_retried_once_on_a_fresh_one(serve):
    s = serve(lambda c, r: CLOSE if (c, r) == (0, 1) else ANSWER)
    client = StdlibHttpClient()
    assert _get(client, s) == "0:0"
    assert _get(client, s) == "1:0"  # the second call's first try met a closed connection
    assert s.connections == 2


def test_a_fresh_connection_closed_before_an_answer_is_an_error_not_retried(serve):
    s = serve(lambda c, r: CLOSE)
    with pytest.raises(HttpError) as info:
        _get(StdlibHttpClient(), s)
    assert info.value.reason == "error"
    assert s.connections == 1


def test_a_timed_out_call_leaves_no_connection_whose_late_answer_the_next_call_would_read(serve):
    s = serve(lambda c, r: HANG if (c, r) == (0, 1) else ANSWER, hang_s=0.6)
    client = StdlibHttpClient()
    assert _get(client, s) == "0:0"
    with pytest.raises(HttpError) as info:
        _get(client, s, timeout=0.3)
    assert info.value.reason == "timeout"
    time.sleep(0.5)  # the hung answer is sent now, to a connection the client has closed
    assert _get(client, s) == "1:0"


def test_a_dead_server_is_refused_even_while_a_connection_to_it_is_kept(serve):
    s = serve()
    client = StdlibHttpClient()
    assert _get(client, s) == "0:0"
    s.close()
    time.sleep(0.1)
    with pytest.raises(HttpError) as info:
        _get(client, s)
    assert info.value.reason == "refused"


def test_a_connection_idle_past_keep_idle_is_closed_not_reused(serve):
    s = serve()
    client = StdlibHttpClient(keep_idle=0.05)
    assert _get(client, s) == "0:0"
    time.sleep(0.15)
    assert _get(client, s) == "1:0"


def test_close_drops_every_kept_connection(serve):
    s = serve()
    client = StdlibHttpClient()
    _get(client, s)
    client.close()
    assert _get(client, s) == "1:0"

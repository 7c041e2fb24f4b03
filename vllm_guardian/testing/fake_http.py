"""A scripted HTTP client: answers by (method, path) and records every request.

Behaves like ``vllm_guardian.host.http.StdlibHttpClient`` in what it claims: the same
``HttpResponse`` and the same ``HttpError`` reasons (refused / timeout / error).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from vllm_guardian.host.http import HttpError, HttpResponse

Answer = HttpResponse | HttpError | Callable[..., HttpResponse]  # (body) or (body, headers)


def ok(body: str | bytes = b"", status: int = 200, elapsed: float = 0.002, content_type: str = "") -> HttpResponse:
    data = body.encode() if isinstance(body, str) else body
    return HttpResponse(status, data, elapsed, content_type)


class FakeHttp:
    def __init__(self, routes: dict[tuple[str, str], Answer] | None = None) -> None:
        self.routes: dict[tuple[str, str], Answer] = dict(routes or {})
        self.requests: list[tuple[str, str, Any, float]] = []
        self.headers: list[dict[str, str]] = []  # the headers of each request, same order

    def route(self, method: str, path: str, answer: Answer) -> None:
        self.routes[(method, path)] = answer

    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        path = urlsplit(url).path
        self.requests.append((method, path, body, timeout))
        self.headers.append(dict(headers or {}))
        answer = self.routes.get((method, path))
        if answer is None:
            return HttpResponse(404, b'{"detail":"Not Found"}', 0.001)
        if isinstance(answer, HttpError):
            raise answer
        if callable(answer):
            if len(inspect.signature(answer).parameters) >= 2:  # an answer that looks at the headers
                return answer(body, dict(headers or {}))
            return answer(body)
        return answer

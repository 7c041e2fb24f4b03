"""A typed port: a call from a part built early to a part built after it.

Two parts that call each other (the responder emits transitions; the emitter tells the
responder an incident opened) cannot both be handed the other built. The assembler makes a
``Port`` first, hands it to the part built first as an ordinary callable, builds the second
part, then binds the port to it, once (``bind`` refuses a second binding). Nothing else is ever
assigned into a part after it was built. A port called before it is bound raises: the
assembler binds every port before the daemon ticks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class Port(Generic[P, R]):
    """A callable that forwards to the one function it is bound to (``bind``, exactly once)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._to: Callable[P, R] | None = None

    def bind(self, to: Callable[P, R]) -> None:
        if self._to is not None:
            raise RuntimeError(f"port {self.name} is already bound")
        self._to = to

    @property
    def bound(self) -> bool:
        return self._to is not None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._to is None:
            raise RuntimeError(f"port {self.name} called before it was bound")
        return self._to(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Port({self.name!r}, bound={self.bound})"

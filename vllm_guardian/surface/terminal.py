"""Text for a terminal: control characters made visible, never interpreted.

What the guardian prints comes partly from others: a report's ``type``, thread and model names, a
server's error body, a process title. An escape sequence among them (``ESC[2J``, a title change,
a hyperlink, ``CR`` overwriting the line) would act on the reader's terminal. ``escape_controls``
writes every C0 and C1 control character except newline and tab as ``\\xNN``; ``EscapingWriter``
does that to everything the CLI writes to stdout (JSON output is already escaped by json.dumps).
"""

from __future__ import annotations

from typing import Any, TextIO

_TABLE = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab written as ``\\xNN``."""
    return text.translate(_TABLE)


class EscapingWriter:
    """A text stream that escapes control characters in what it is given; the rest is the inner one's."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        return self._inner.write(escape_controls(text))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

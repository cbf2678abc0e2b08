"""The end of what the watched script writes to its stderr, kept as it goes to the terminal: a run that fails
says why in its report, not only on the screen."""

from __future__ import annotations

import collections
import sys
from typing import Any

TAIL_LINES = 10
"""Lines of the script's stderr kept."""
LINE_CHARS = 300
"""A kept line is cut to this many characters."""


class StderrTail:
    """``sys.stderr`` as the script has it, every write passed on unchanged, its last lines kept. Everything else
    (``fileno``, ``isatty``, ``encoding``, ``buffer``) is the stream's own."""

    def __init__(self, inner: Any, lines: int = TAIL_LINES) -> None:
        self._inner = inner
        self._keep = lines
        self._tail: collections.deque[str] = collections.deque(maxlen=lines)
        self._partial = ""

    @classmethod
    def install(cls) -> StderrTail:
        """Put a tail on ``sys.stderr`` of this process; the tail."""
        tail = cls(sys.stderr)
        sys.stderr = tail  # type: ignore[assignment]
        return tail

    def write(self, text: str) -> int:
        """Pass ``text`` on, and keep its lines."""
        written = self._inner.write(text)
        if isinstance(text, str):
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()[-LINE_CHARS:]
            self._tail.extend(part[:LINE_CHARS] for part in parts)
        return int(written) if written is not None else len(text)

    def lines(self) -> list[str]:
        """The last lines written, the unfinished one included; blank lines left out."""
        return [line.rstrip() for line in (*self._tail, self._partial) if line.strip()][-self._keep:]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

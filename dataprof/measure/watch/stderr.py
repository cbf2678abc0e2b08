"""The end of what the watched script writes to its stderr, and its lines that name a cause a run fails for
wherever they stand, kept as it goes to the terminal: a run that fails says why in its report, not only on the
screen."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterable
from typing import Any

TAIL_LINES = 10
CAUSE_LINES = 8
"""Lines naming a cause kept, at most (the first of each)."""
"""Lines of the script's stderr kept."""
LINE_CHARS = 300
"""A kept line is cut to this many characters."""


class StderrTail:
    """``sys.stderr`` as the script has it, every write passed on unchanged, its last lines kept. Everything else
    (``fileno``, ``isatty``, ``encoding``, ``buffer``) is the stream's own."""

    def __init__(self, inner: Any, lines: int = TAIL_LINES, words: Iterable[str] = ()) -> None:
        self._inner = inner
        self._keep = lines
        self._tail: collections.deque[str] = collections.deque(maxlen=lines)
        self._partial = ""
        self._words = tuple(words)
        self.causes: list[str] = []
        """Lines written that hold one of the words (lower case), in order, the first :data:`CAUSE_LINES`."""

    @classmethod
    def install(cls, words: Iterable[str] = ()) -> StderrTail:
        """Put a tail on ``sys.stderr`` of this process, keeping the lines that hold ``words`` too; the tail."""
        tail = cls(sys.stderr, words=words)
        sys.stderr = tail  # type: ignore[assignment]
        return tail

    def write(self, text: str) -> int:
        """Pass ``text`` on, and keep its lines."""
        written = self._inner.write(text)
        if isinstance(text, str):
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()[-LINE_CHARS:]
            self._tail.extend(part[:LINE_CHARS] for part in parts)
            for part in parts:
                if len(self.causes) < CAUSE_LINES and any(word in part.lower() for word in self._words) \
                        and part[:LINE_CHARS].rstrip() not in self.causes:
                    self.causes.append(part[:LINE_CHARS].rstrip())
        return int(written) if written is not None else len(text)

    def lines(self) -> list[str]:
        """The last lines written, the unfinished one included; blank lines left out."""
        return [line.rstrip() for line in (*self._tail, self._partial) if line.strip()][-self._keep:]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

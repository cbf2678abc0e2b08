"""Formatting of measured quantities, shared by messages and renderers."""

from __future__ import annotations


def fmt_bytes(n: float | None) -> str:
    """Compact decimal size: ``950KB``, ``1.2GB``, ``203MB``; ``–`` when unknown."""
    if n is None:
        return "–"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "B" or abs(n) >= 100 else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}TB"


def fmt_change(share: float, digits: int = 0) -> str:
    """``share`` as a signed percentage (``+12%``, ``-3%``, ``+0.4%`` at one digit); one that rounds to nothing
    is ``+0%``, never ``-0%``."""
    shown = round(100 * share, digits) + 0.0  # -0.0 + 0.0 is 0.0
    return f"{shown:+.{digits}f}%"

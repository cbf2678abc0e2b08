"""How measured quantities are written: sizes, and signed changes that never read as a negative nothing."""

from __future__ import annotations

from dataprof.results.units import fmt_bytes, fmt_change


def test_a_change_is_signed_and_one_that_rounds_to_nothing_is_plus_zero() -> None:
    assert [fmt_change(x) for x in (0.12, -0.034, -0.004, 0.0, -0.0)] == ["+12%", "-3%", "+0%", "+0%", "+0%"]
    assert fmt_change(-0.0004, 1) == "+0.0%" and fmt_change(-0.0123, 1) == "-1.2%"


def test_sizes_are_compact_decimal_units() -> None:
    assert [fmt_bytes(n) for n in (950, 1_234_000, 203_400_000, None)] == ["950B", "1.2MB", "203MB", "–"]

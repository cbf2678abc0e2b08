"""The command line's option text into typed values."""

from __future__ import annotations

import pytest

from dataprof.cli.params import parse_int_list, parse_onoff_list, parse_size
from dataprof.errors import UsageError


def test_int_list_parses_and_dedups() -> None:
    assert parse_int_list("0, 2,4,2", "--workers", 0) == (0, 2, 4)


@pytest.mark.parametrize("text,fragment", [("-1", "below the minimum"), ("2,x", "'x' is not an integer"),
                                           ("", "'' is not an integer"), ("2,,4", "is not an integer")])
def test_int_list_rejects(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_int_list(text, "--workers", 0)


def test_prefetch_zero_is_rejected() -> None:
    with pytest.raises(UsageError, match="--prefetch-factor: 0 is below the minimum of 1"):
        parse_int_list("0", "--prefetch-factor", 1)


def test_onoff() -> None:
    assert parse_onoff_list("on,off", "--pin-memory") == (True, False)
    assert parse_onoff_list("OFF", "--pin-memory") == (False,)
    with pytest.raises(UsageError, match="'maybe' is not on or off"):
        parse_onoff_list("maybe", "--pin-memory")


def test_sizes() -> None:
    assert parse_size("3GB", 0) == 3 * 10**9
    assert parse_size("512MiB", 0) == 512 * 2**20
    assert parse_size("50%", 1000) == 500
    assert parse_size("1e9", 0) == 10**9
    for bad in ("lots", "0", "150%", "-1GB"):
        with pytest.raises(UsageError):
            parse_size(bad, 1000)

"""Option text into typed values (whether the values are allowed is the plan's to say)."""

from __future__ import annotations

import pytest

from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig
from dataprof.results.request import MemoryLimit
from dataprof.results.text import (
    parse_current,
    parse_int_list,
    parse_onoff_list,
    parse_size,
    parse_words,
    parse_workers,
)


def test_int_list_parses_and_dedups() -> None:
    assert parse_int_list("0, 2,4,2", "--workers") == (0, 2, 4)
    assert parse_int_list("-1", "--workers") == (-1,)  # read; the plan refuses it
    assert parse_workers("auto") is None and parse_workers(" AUTO ") is None and parse_workers("2,4") == (2, 4)


@pytest.mark.parametrize("text,fragment", [("2,x", "--workers: 'x' is not an integer"),
                                           ("", "'' is not an integer"), ("2,,4", "is not an integer")])
def test_int_list_rejects(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_int_list(text, "--workers")


def test_onoff() -> None:
    assert parse_onoff_list("on,off", "--pin-memory") == (True, False)
    assert parse_onoff_list("OFF", "--pin-memory") == (False,)
    with pytest.raises(UsageError, match="'maybe' is not on or off"):
        parse_onoff_list("maybe", "--pin-memory")


def test_words_are_lower_case_and_unique() -> None:
    assert parse_words("Fork, spawn,fork,") == ("fork", "spawn")


def test_sizes() -> None:
    assert parse_size("3GB") == MemoryLimit(bytes=3 * 10**9)
    assert parse_size("512MiB") == MemoryLimit(bytes=512 * 2**20)
    assert parse_size("50%") == MemoryLimit(share=0.5)
    assert parse_size("1e9") == MemoryLimit(bytes=10**9)
    for bad in ("lots", "0", "150%", "-1GB"):
        with pytest.raises(UsageError, match="--memory-limit"):
            parse_size(bad)


def test_current_settings_read_as_the_dataloader_takes_them() -> None:
    assert parse_current("num_workers=8") == LoaderConfig(8, False, 2, False)
    assert parse_current("num_workers=4, prefetch_factor=4, persistent_workers=on") == LoaderConfig(4, False, 4, True)
    assert parse_current("num_workers=0,pin_memory=true") == LoaderConfig(0, pin_memory=True)
    assert parse_current("num_workers=2,use_shared_memory=off").framework == "paddle"
    threads = parse_current("num_workers=4,worker_kind=thread,prefetch_factor=4,in_order=off")
    assert threads == LoaderConfig(4, False, 4, None, in_order=False).as_threads()
    assert threads.label() == "t4 pf4 unordered"
    assert parse_current("num_workers=0,worker_kind=thread") == LoaderConfig(0)  # no workers: no kind
    for bad, message in (("workers=8", "expected KNOB=VALUE"), ("prefetch_factor=2", "give num_workers"),
                         ("num_workers=-1", "below the minimum of 0"), ("num_workers=two", "not an integer"),
                         ("num_workers", "expected KNOB=VALUE"),
                         ("num_workers=2,worker_kind=thread,persistent_workers=on",
                          "threads of the one process take no persistent_workers"),
                         ("num_workers=2,worker_kind=thread,use_shared_memory=off", "these are Paddle's knobs")):
        with pytest.raises(UsageError, match=message):
            parse_current(bad)


def test_every_knob_of_the_registry_parses_from_current_and_override_as_its_record_says() -> None:
    from dataprof.results.registry import REGISTRY
    from dataprof.results.text import parse_knobs

    samples = {"ints": ("4", 4), "on,off": ("on", True), "words": ("thread", "thread")}
    for knob in REGISTRY:
        text, value = samples[knob.values]
        if knob.name == "multiprocessing_context":
            text, value = "spawn", "spawn"
        for flag in ("--current", "--override"):
            assert parse_knobs(f"num_workers=2,{knob.name}={text}", flag) == {"num_workers": 2, knob.name: value}

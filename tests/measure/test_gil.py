"""The GIL measure on work whose answer is known: a sleep releases the GIL, a Python loop holds it, a numpy sort
releases it. A CPU taken away only lowers the share of work that releases the GIL (the pair overlaps less), so
that share is the best of several measures, taken until two CPUs were free for one (or none told as held, where
they never were); the Python loop's, the least of three. Timing real work, those are slow tests; so are the
measures in a process of their own (a crash or a hang there costs only the figure)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from dataprof.measure.gil import gil_enabled, release_share, release_share_apart, usable_cpus
from dataprof.results.threads import GilShare

pytestmark = pytest.mark.skipif(usable_cpus() < 2 or not gil_enabled(), reason="needs two CPUs and a GIL")


@pytest.mark.slow
def test_a_sleep_releases_the_gil() -> None:
    share = release_share(lambda _: time.sleep(0.005), range(64), budget_s=0.2)
    assert share.release is not None and share.release >= 0.7
    assert share.calls >= 2 and share.paired_s < 2 * share.alone_s


@pytest.mark.slow
def test_a_python_loop_holds_the_gil() -> None:
    def spin(_: int) -> int:
        total = 0
        for i in range(20_000):
            total += i * i
        return total

    # three measures, and more (30 s at most) until one reads it held: beside the other test process (``pytest
    # -n 2``), all of one stretch's measures read a pure-Python loop as 54% released once here (its time alone
    # slowed by what Linux does not count as a wait: not told apart yet)
    deadline = time.monotonic() + 30.0
    reads: list[float] = []
    while len(reads) < 3 or (min(reads) > 0.3 and time.monotonic() < deadline):
        reads.append(release_share(spin, range(64), budget_s=0.2).release or 0.0)
    assert min(reads) <= 0.3, reads


@pytest.mark.slow
def test_a_numpy_sort_releases_the_gil() -> None:
    data = np.random.default_rng(0).random(200_000)
    shares = measures(lambda _: np.sort(data), budget_s=0.4)
    # with both CPUs taken by other work for all its measures, the measure may say it cannot tell: never "held"
    assert max(share.release or 0.0 for share in shares) >= 0.5 or \
        not any(share.settled is not None and share.settled <= 0.2 for share in shares), shares


def measures(call: Callable[[int], object], budget_s: float, least: int = 5, until_s: float = 30.0,
             enough: float = 0.5) -> list[GilShare]:
    """``least`` measures of ``call``'s share, and more until one reads ``enough`` or ``until_s`` passed: the pair
    overlaps only on two free CPUs, which the test beside this one (``pytest -n 2``) takes one of while it
    computes, at times for seconds."""
    deadline = time.monotonic() + until_s
    shares: list[GilShare] = []
    while len(shares) < least or (max(s.release or 0.0 for s in shares) < enough and time.monotonic() < deadline):
        shares.append(release_share(call, range(256), budget_s=budget_s))
    return shares


def test_one_cpu_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataprof.measure.gil as gil

    monkeypatch.setattr(gil, "usable_cpus", lambda: 1)
    share = gil.release_share(lambda _: None, range(4))
    assert share.release is None and share.why is not None and "one usable CPU" in share.why
    assert "not measured" in share.words()


@pytest.mark.slow
def test_work_that_blocks_in_a_second_thread_ends_with_the_measure_s_process() -> None:
    import threading

    def main_thread_only(_: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            threading.Event().wait()

    before = threading.active_count()
    share = release_share_apart(main_thread_only, range(4))
    assert share.release is None and share.why is not None and "did not finish in a second thread" in share.why
    assert threading.active_count() == before  # nothing left behind here


@pytest.mark.slow
def test_a_sample_that_crashes_in_a_second_thread_costs_only_the_figure() -> None:
    import ctypes
    import threading

    def crashes_in_threads(_: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            ctypes.string_at(0)  # a C extension that is not thread-safe

    share = release_share_apart(crashes_in_threads, range(4))
    assert share.release is None and share.why is not None and "killed by SIGSEGV" in share.why


TORCH_AFTER_ITS_POOL = """
import torch
from dataprof.measure.gil import release_share_apart
torch.set_num_threads(2)
torch.ones(10_000_000).mul_(2)  # torch's OpenMP pool started here, as a dataset's first sample starts it
share = release_share_apart(lambda n: torch.ones(2_000_000).mul_(n), range(4))
print(share.why or share.release)
"""


@pytest.mark.slow
def test_a_sample_of_torch_ops_is_measured_after_the_process_used_its_thread_pool() -> None:
    """The pool does not come with the fork (libgomp is not fork-safe): the measure's process runs torch on one
    thread, as a DataLoader worker does, or its first parallel op waits for ever (a torchvision pipeline's GIL
    share was never told)."""
    import subprocess
    import sys

    if usable_cpus() < 2 or not gil_enabled():
        pytest.skip("the measure needs two CPUs and a GIL")
    done = subprocess.run([sys.executable, "-c", TORCH_AFTER_ITS_POOL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "did not finish" not in done.stdout and float(done.stdout) >= 0.0


@pytest.mark.slow
def test_a_slow_sample_is_measured_in_time_scaled_to_it() -> None:
    share = release_share_apart(lambda _: time.sleep(0.25), range(4))
    assert share.release is not None and share.release >= 0.7, share
    assert share.release_low is not None and share.release_high is not None
    assert share.release_low <= share.release <= share.release_high + 1e-9 or share.release_high >= 0.7


def test_a_free_threaded_interpreter_releases_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataprof.measure.gil as gil

    monkeypatch.setattr(gil, "gil_enabled", lambda: False)
    share = gil.release_share(lambda _: None, range(4))
    assert share.free_threaded and share.release == 1.0
    assert "free-threaded" in share.words()


def test_a_wait_at_the_end_of_the_time_alone_never_makes_it_shorter_than_the_calls_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataprof.measure.gil as gil

    # the calls run 1 s from t=10; the thread is then kept off its CPU 0.5 s right after its first reading at the
    # end, whichever that is: taken out of the time without being in it, the time alone would read 0.5 s
    world = {"now": 10.0, "waited": 5.0, "ran": False}

    def read(key: str) -> float:
        value = world[key]
        if world["ran"]:
            world.update(ran=False, now=world["now"] + 0.5, waited=world["waited"] + 0.5)
        return value

    def call(_: object) -> None:
        world.update(now=world["now"] + 1.0, ran=True)

    monkeypatch.setattr(gil, "_waited", lambda: read("waited"))
    assert gil._timed_alone(call, [0], lambda: read("now")) >= 1.0


def test_the_time_alone_leaves_out_what_the_thread_waited_for_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataprof.measure.gil as gil

    # 1 s of held work alone, kept waiting 0.8 s by other processes; its pair took the 2 s two threads need: the
    # wall time alone (1.8 s) would read (3.6 - 2) / 1.8 = 89% overlap
    waits, clock = iter([5.0, 5.8]), iter([10.0, 11.8])
    monkeypatch.setattr(gil, "_waited", lambda: next(waits))
    assert gil._timed_alone(lambda _: None, [0], lambda: next(clock)) == pytest.approx(1.0)
    monkeypatch.setattr(gil, "usable_cpus", lambda: 2)
    monkeypatch.setattr(gil, "_timed_alone", lambda call, items, clock: 1.0)
    monkeypatch.setattr(gil, "_timed_pair", lambda call, items, clock, timeout_s: gil.Pair(2.0, (0.0, 0.0)))
    share = gil.release_share(lambda _: None, range(4), budget_s=0.0)
    assert share.release == share.release_high == 0.0 and (share.alone_s, share.paired_s) == (1.0, 2.0)


def test_a_pair_kept_waiting_for_a_cpu_reads_as_low_as_its_wall_time_and_as_high_as_its_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataprof.measure.gil as gil

    # 1 s alone; the pair took 2 s, its threads waiting 1 s each for a CPU: released work kept off both CPUs
    # (100%) or held work whose waiting thread waited beside the other's work (0%); the measure cannot tell which
    monkeypatch.setattr(gil, "usable_cpus", lambda: 2)
    monkeypatch.setattr(gil, "_timed_alone", lambda call, items, clock: 1.0)
    monkeypatch.setattr(gil, "_timed_pair", lambda call, items, clock, timeout_s: gil.Pair(2.0, (1.0, 1.0)))
    share = gil.release_share(lambda _: None, range(4), budget_s=0.0)
    assert (share.release, share.release_low, share.release_high) == (0.0, 0.0, 1.0)
    assert share.words() == "releases the GIL 0–100% of its time: other processes kept its threads waiting for a " \
        "CPU, so the measure cannot tell"


def test_a_share_one_of_whose_rounds_read_far_lower_is_not_told() -> None:
    """The least time alone and the least time paired can come from two moments of a host whose speed moved: held
    work then reads as released (0.68 and 0.74 for a pure-Python loop on this machine)."""
    moved = GilShare(release=0.74, calls=5, alone_s=0.03, paired_s=0.04, release_low=0.0, release_high=0.8)
    assert moved.settled is None and "the machine's speed moved between them" in moved.words()
    steady = GilShare(release=0.96, calls=5, alone_s=0.03, paired_s=0.031, release_low=0.9, release_high=0.99)
    assert steady.settled == 0.96 and "releases the GIL 96%" in steady.words()

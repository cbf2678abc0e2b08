from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest

from dataprof.measure.sweep.failures import Live
from dataprof.measure.timing import BatchLog, Rival, summarize, window_done
from dataprof.results.codec import encode
from dataprof.results.knobs import warmup_batches
from dataprof.results.stats import percentile


def steady_log(batches: int, wait: float, copy: float, step: float, size: int) -> BatchLog:
    log = BatchLog()
    t = 0.0
    for _ in range(batches):
        t += wait + copy + step
        log.add(wait, wait / 2, copy, step, t, size)
    return log


def test_summarize_steady_pipeline_exactly() -> None:
    log = steady_log(30, wait=0.03, copy=0.0, step=0.01, size=8)
    figures = summarize(log, first=9, num_workers=0)
    assert figures["batches"] == 20
    assert figures["samples"] == 160
    assert figures["window_s"] == pytest.approx(20 * 0.04)
    assert figures["samples_per_s"] == pytest.approx(8 / 0.04)
    assert figures["wait_fraction"] == pytest.approx(0.75)
    assert figures["wait_ms"]["p50"] == pytest.approx(30.0)
    assert figures["step_ms_mean"] == pytest.approx(10.0)
    assert figures["wait_cpu_ms_mean"] == pytest.approx(15.0)
    assert figures["wait_ms"]["mean"] == pytest.approx(30.0)
    assert figures["samples_per_s_spread"] == pytest.approx(0.0, abs=1e-9)


def test_warmup_excludes_the_prefetch_buffer() -> None:
    # The first 12 batches come from a full buffer (no wait), then the real rate shows.
    log = BatchLog()
    t = 0.0
    for i in range(40):
        wait = 0.0 if i < 12 else 0.1
        t += wait + 0.001
        log.add(wait, 0.0, 0.0, 0.001, t, 4)
    first = warmup_batches(num_workers=4, prefetch_factor=2) - 1
    assert first >= 11
    assert summarize(log, first, 4)["samples_per_s"] == pytest.approx(4 / 0.101)


def test_whole_rounds_remove_burst_phase_bias() -> None:
    # 4 workers deliver in bursts: 4 batches at once, then 0.4 s of nothing.
    log = BatchLog()
    t = 0.0
    for i in range(64):
        wait = 0.4 if i % 4 == 0 else 0.0
        t += wait
        log.add(wait, 0.0, 0.0, 0.0, t, 10)
    true_rate = 40 / 0.4
    for first in range(8, 12):  # any phase of the burst
        end = first + 4 * 10
        keep = slice(0, end + 1)
        trimmed = BatchLog(log.wait_s[keep], log.wait_cpu_s[keep], log.copy_s[keep], log.step_s[keep],
                           log.end_t[keep], log.size[keep])
        assert summarize(trimmed, first, 4)["samples_per_s"] == pytest.approx(true_rate)


def test_window_ends_on_whole_rounds_after_the_target_time() -> None:
    assert not window_done(12, 2.9, 3.0, 4)
    assert not window_done(13, 3.1, 3.0, 4)
    assert window_done(16, 3.1, 3.0, 4)
    assert not window_done(2, 5.0, 3.0, 0)
    assert window_done(3, 5.0, 3.0, 0)


def test_a_window_ends_once_the_question_it_serves_is_settled() -> None:
    assert not window_done(16, 1.6, 3.0, 4, spread=0.025)  # the default wants ±1%
    assert window_done(16, 1.6, 3.0, 4, spread=0.025, settled=True)  # slower than the best beyond the noise
    assert not window_done(16, 1.2, 3.0, 4, spread=0.025, settled=True)  # never before the minimum window


def test_percentile() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 95) == 5.0


class _DyingWorker:
    """A worker process whose exit is reported only once it is joined."""

    def __init__(self, code: int) -> None:
        self.exitcode: int | None = None
        self._code = code

    def join(self, timeout: float | None = None) -> None:
        self.exitcode = self._code


def test_a_broken_pipe_waits_for_the_dying_worker_to_name_its_signal() -> None:
    import signal

    from dataprof.measure.sweep.failures import classify_loader_error, worker_signals

    iterator = types.SimpleNamespace(_workers=[_DyingWorker(0), _DyingWorker(-int(signal.SIGSEGV))])
    assert worker_signals(iterator) == []
    names = worker_signals(iterator, wait_s=1.0)
    assert names == ["SIGSEGV"]
    status, message = classify_loader_error(ConnectionResetError("reset by peer"), names)
    assert status == "crashed" and "SIGSEGV" in message


class _HealthyWorker:
    """A worker process that stays alive: each join waits out its timeout, counted."""

    def __init__(self) -> None:
        self.exitcode: int | None = None
        self.waited_s = 0.0

    def join(self, timeout: float | None = None) -> None:
        self.waited_s += timeout or 0.0


def test_the_first_worker_found_dead_by_a_signal_ends_the_wait() -> None:
    import signal

    from dataprof.measure.sweep.failures import worker_signals

    healthy = _HealthyWorker()
    iterator = types.SimpleNamespace(_workers=[healthy, _DyingWorker(-int(signal.SIGSEGV))])
    assert worker_signals(iterator, wait_s=30.0) == ["SIGSEGV"]
    assert healthy.waited_s < 1.0  # not the whole wait on the live worker before the dead one was looked at


def test_an_error_from_the_framework_s_own_code_may_be_a_worker_s_death() -> None:
    from dataprof.measure.sweep.failures import may_be_a_dead_worker

    def raised(code: str, filename: str) -> BaseException:
        try:
            exec(compile(code, filename, "exec"))
        except BaseException as exc:
            return exc
        raise AssertionError("did not raise")

    internal = ("/paddle/",)
    # Paddle's main thread, a dead worker's shared memory gone: the framework's error, worded its own way
    opened = raised("raise RuntimeError('(Unavailable) File descriptor /paddle_1_0_2 open failed')",
                    "/site-packages/paddle/incubate/multiprocessing/reductions.py")
    assert may_be_a_dead_worker(opened, internal)
    assert may_be_a_dead_worker(raised("raise EOFError()", "/app/data.py"), internal)  # a pipe's end
    # the user's own error, and a worker's error re-raised with its traceback: the workers are alive
    assert not may_be_a_dead_worker(raised("raise KeyError('label')", "/app/data.py"), internal)
    reraised = raised("raise KeyError('DataLoader worker(1) caught KeyError with message:\\n"
                      "Traceback (most recent call last):\\n  KeyError: 3')", "/site-packages/paddle/io/loader.py")
    assert not may_be_a_dead_worker(reraised, internal)


def test_a_steady_window_may_end_before_the_target() -> None:
    assert window_done(16, 1.6, 3.0, 4, spread=0.005)
    assert not window_done(16, 1.6, 3.0, 4, spread=0.05)
    assert not window_done(16, 1.0, 3.0, 4, spread=0.005)
    assert not window_done(15, 1.6, 3.0, 4, spread=0.005)
    assert window_done(16, 3.0, 3.0, 4, spread=None)


def _four_workers(gap: Callable[[], float], rival: Rival | None = None, step_s: float = 0.0,
                  emit: Callable[[dict[str, Any]], None] = lambda event: None,
                  first_pass: bool = False) -> dict[str, Any]:
    """The figures of the real TimedLoop over a fake loader of four workers, on a fake clock: each round of
    their batches comes ``gap()`` seconds after the last one; the model's step takes ``step_s``; ``emit`` gets
    the trial's events."""
    import torch

    from dataprof.measure.sweep.receive import ReceiveTimer
    from dataprof.measure.sweep.trial import TimedLoop
    from dataprof.results.knobs import LoaderConfig

    now = [0.0]

    def rounds() -> Iterator[Any]:
        for i in range(100_000):
            now[0] += gap() if i % 4 == 0 else 0.0001
            yield torch.zeros(16)

    class Loader:
        def __iter__(self) -> Iterator[Any]:
            return rounds()

    def step(batch: Any) -> None:
        now[0] += step_s

    consumer = types.SimpleNamespace(to_device=lambda batch: batch, step=step)
    loop = TimedLoop(LoaderConfig(4, False, 2, True), 3.0, emit, consumer, lambda: now[0], None,
                     ReceiveTimer(None), False, rival, first_pass)
    # the loop collects garbage before its workers fork (FORK_CLEAN); this fake loader forks none, and a collection
    # of the test process's heap costs ~0.1 s a window
    with mock.patch("gc.collect", lambda: 0):
        return encode(loop.run(Loader(), Live(), types.SimpleNamespace(shutdown=lambda iterator: None)))


def test_a_model_step_longer_than_loading_leaves_the_loop_waiting_a_small_share() -> None:
    """A 20 ms step behind batches that take 1.3 ms a round of four: the wait is that share of each round."""
    figures = _four_workers(lambda: 0.001, step_s=0.020)
    assert figures["step_ms_mean"] == pytest.approx(20.0)
    assert figures["wait_fraction"] == pytest.approx(0.0013 / (0.0013 + 4 * 0.020))
    assert figures["samples_per_s"] == pytest.approx(4 * 16 / (0.0013 + 4 * 0.020))


def test_a_warm_trial_pauses_its_open_log_half_a_second_into_its_window() -> None:
    """The log's files per sample come from the window's first half second; the rest of the window pays no log.
    A cold trial logs to its end (its files are what it measures)."""
    from dataprof.measure.sweep import trial

    def events(first_pass: bool) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        with mock.patch.object(trial, "pause_installed", lambda: 123.0):
            _four_workers(lambda: 0.01, emit=got.append, first_pass=first_pass)
        return [e for e in got if e["ev"] in ("window_start", "log_paused")]

    assert events(False) == [{"ev": "window_start"}, {"ev": "log_paused", "at": 123.0}]
    assert events(True) == [{"ev": "window_start"}]


def test_a_window_of_short_epochs_holds_whole_epochs_and_their_ends() -> None:
    """Epochs of 8 batches, 10 ms each on two workers, and 60 ms at every epoch's start (the pipeline drains and
    fills again): the training runs 8 batches in 130 ms. A window that ends inside an epoch reads the 10 ms pace;
    one of whole epochs holds an end for each epoch, whatever batch it started at."""
    import torch

    from dataprof.measure.sweep.receive import ReceiveTimer
    from dataprof.measure.sweep.trial import TimedLoop
    from dataprof.results.knobs import LoaderConfig

    now = [0.0]

    class Loader:
        def __len__(self) -> int:
            return 8

        def __iter__(self) -> Iterator[Any]:
            for i in range(8):
                now[0] += 0.060 if i == 0 else 0.010
                yield torch.zeros(16)

    consumer = types.SimpleNamespace(to_device=lambda batch: batch, step=lambda batch: None)
    loop = TimedLoop(LoaderConfig(2, False, 2, True), 3.0, lambda event: None, consumer, lambda: now[0], None,
                     ReceiveTimer(None), False)
    with mock.patch("gc.collect", lambda: 0):
        figures = encode(loop.run(Loader(), Live(), types.SimpleNamespace(shutdown=lambda iterator: None)))
    assert figures["batches"] % 8 == 0
    assert figures["samples_per_s"] == pytest.approx(8 * 16 / 0.130)
    from dataprof.measure.timing import window_unit

    assert window_unit(2, 8, 16, 0.3, 3.0) == 8 and window_unit(2, 800, 16, 0.3, 3.0) == 2  # an epoch of 15 s
    assert window_unit(4, None, 16, 0.3, 3.0) == 4


def test_a_steady_window_ends_early_whatever_batch_of_a_round_its_checks_land_on() -> None:
    """Four workers hand their batches over together every 64 ms: the first batch after a check's interval is
    always the first of a round, so checks gated on time alone never saw a whole round and the window ran to
    the target."""
    figures = _four_workers(lambda: 0.064)
    assert figures["samples_per_s_spread"] < 0.01 and figures["window_s"] < 2.0


def test_a_noisy_window_ends_at_its_minimum_once_it_trails_its_rival() -> None:
    """Four workers' rounds come 20–120 ms apart at random (a ±9% spread, never steady): the window runs to
    the target, unless the trial it is weighed against is faster beyond the noise."""
    import random

    def window(rival: Rival | None) -> dict[str, Any]:
        gaps = random.Random(0)
        return _four_workers(lambda: gaps.uniform(0.02, 0.12), rival)

    alone = window(None)
    rate = alone["samples_per_s"]
    assert alone["samples_per_s_spread"] > 0.02 and alone["window_s"] >= 3.0
    for either_way in (False, True):  # a close call is measured whole
        assert window(Rival(rate, 0.01, either_way))["window_s"] >= 3.0
    assert window(Rival(2.0 * rate, 0.01))["window_s"] < 2.0
    assert window(Rival(0.5 * rate, 0.01))["window_s"] >= 3.0  # a win: its figure is measured whole
    assert window(Rival(0.5 * rate, 0.01, either_way=True))["window_s"] < 2.0  # a climb: it pays, go on


def test_a_rate_settles_its_rival_beyond_the_noise_the_search_uses() -> None:
    best = Rival(1000.0, 0.01)
    assert best.settled_by(900.0, 0.01)  # 10% slower, ±3% noise
    assert not best.settled_by(980.0, 0.01)  # within the 3% floor
    assert not Rival(1000.0, 0.05).settled_by(850.0, 0.1)  # 15% slower, but within ±22% noise
    assert not best.settled_by(1200.0, 0.01)  # faster: a win needs its figure measured whole
    assert Rival(1000.0, 0.01, either_way=True).settled_by(1200.0, 0.01)  # a climb: it pays, the climb goes on
    assert not Rival(1000.0, 0.01, either_way=True).settled_by(1020.0, 0.01)


def test_a_worker_killed_by_a_signal_ends_a_blocked_trial_as_crashed() -> None:
    import threading
    from types import SimpleNamespace

    from dataprof.measure.sweep.failures import DeadWorkerWatch, classify_loader_error, worker_signals

    live = Live(SimpleNamespace(_workers=[SimpleNamespace(exitcode=None), SimpleNamespace(exitcode=-11)]))
    said: list[tuple[str, str]] = []
    ended: list[int] = []

    def report(exc: BaseException, wait_s: float) -> None:
        said.append(classify_loader_error(exc, worker_signals(live.iterator, wait_s)))

    blocked = threading.Event()  # the main thread never reports
    DeadWorkerWatch(live, report, blocked, interval_s=0.01, grace_s=0.01, end=ended.append).start().thread.join(5)
    assert said == [("crashed", "a DataLoader worker died by SIGSEGV")] and ended == [1]
    handled = threading.Event()
    handled.set()  # the main thread noticed and reported first: the watch stays quiet
    said.clear()
    DeadWorkerWatch(live, report, handled, interval_s=0.01, grace_s=0.01, end=ended.append).start().thread.join(5)
    assert said == [] and ended == [1]

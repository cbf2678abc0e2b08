"""What the trials say, in words the search story quotes: how high the throughput curve can peak below a best
past its knee, a dip that contradicts its one peak, the wait figures behind a deeper buffer or
``in_order=False``, and the start methods worth a trial."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dataprof.results.space import SearchSpace
from dataprof.results.threads import gil_untold
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import StartMethod, TrialStatus

COPIED_PER_WORKER = 8 * 1024 * 1024
"""Copy-on-read growth per worker (in the window) from which the other start methods are worth a try."""


def midpoint(low: int, high: int) -> int:
    """The geometric midpoint of two worker counts (the ladder is geometric), strictly between them when there
    is room."""
    middle = round(math.sqrt(low * high)) if low > 0 else high // 2
    return middle if low < middle < high else (low + high) // 2


def per_worker_rise(trials: Sequence[TrialResult]) -> float:
    """The fastest rate per worker measured (samples/s ÷ ``num_workers``): the slope of the throughput curve
    while it still rises linearly (latency-bound counts load ``W / s``); 0 before any trial with workers."""
    ok = [t for t in trials if t.status == TrialStatus.OK and t.config.num_workers > 0 and t.samples_per_s]
    return max(((t.samples_per_s or 0.0) / t.config.num_workers for t in ok), default=0.0)


def knee_gain(trials: Sequence[TrialResult], below: TrialResult, best: TrialResult, above: TrialResult,
              linear: float) -> float | None:
    """How far above ``best`` a count between ``below`` and it can load, once ``best`` is past the knee of the
    throughput curve; None when it is not (or ``above`` loads as fast as it), and more workers may still pay.

    The curve rises as workers are added, never faster per worker than the fastest per-worker rate measured
    (latency-bound counts load ``W / s``), then bends at a ceiling (the CPUs, the main process, workers
    crowding each other) and falls from there at most as fast as it falls from ``best`` to ``above`` (linear
    in log workers). ``best`` is past the knee when it loads under ``linear`` of that rise; then no count
    above it can load faster, and below it the curve peaks at most where the rise meets the fall (no lower
    than ``below``'s count): the figure returned, over ``best``'s rate."""
    rise = per_worker_rise(trials)
    w_low, w, w_high = below.config.num_workers, best.config.num_workers, above.config.num_workers
    rate, lower = best.samples_per_s or 0.0, above.samples_per_s or 0.0
    if not 0 < w_low < w < w_high or rate <= 0 or lower >= rate or rate >= linear * rise * w:
        return None
    fall = (rate - lower) / math.log2(w_high / w)  # samples/s lost per doubling of workers past the knee

    def ceiling(workers: float) -> float:
        return min(rise * workers, rate + fall * math.log2(w / workers))

    low, high = float(w_low), float(w)  # the rise climbs with workers, the fall's extension descends: bisect
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if rise * middle < rate + fall * math.log2(w / middle) else (low, middle)
    return max(ceiling(w_low), ceiling(low)) / rate - 1


def first_dip(trials: Sequence[TrialResult], margin: float) -> tuple[TrialResult, str] | None:
    """The first of ``trials`` (one knob setting, by worker count) measured once that loads slower than both
    counts either side of it, and slower than the line between them by more than ``margin``, with the figures
    in words; None when there is none. A curve of throughput against workers has one peak (it rises, bends,
    then stays flat or falls), so such a dip contradicts it; measured twice, it stands."""
    ok = sorted((t for t in trials if t.status == TrialStatus.OK and t.config.num_workers > 0),
                key=lambda t: t.config.num_workers)
    for left, middle, right in zip(ok, ok[1:], ok[2:], strict=False):
        (w_left, a), (w, rate), (w_right, b) = ((t.config.num_workers, t.samples_per_s or 0.0)
                                                for t in (left, middle, right))
        line = a + (b - a) * (w - w_left) / (w_right - w_left)
        if middle.repeats == 1 and rate < min(a, b) and rate < line * (1 - margin):
            return middle, (f"it loads {1 - rate / line:.0%} below the line from w{w_left} to w{w_right}, slower "
                            "than both, and throughput against workers has one peak")
    return None


def start_methods_to_try(trial: TrialResult, start_method: str | None, available: Sequence[str]) -> tuple[str, ...]:
    """The start methods worth one trial at ``trial``'s config: under a default other than fork (Python 3.14's
    forkserver, spawn), fork when it is offered: it starts workers without pickling the dataset into each;
    under fork, the others only when the workers copied the main process's pages (copy-on-read), where a
    worker holding its own unpickled copy can weigh less. Fork starts workers fastest, so a slow start under
    fork is no reason to try the others."""
    if (start_method or "fork") != StartMethod.FORK:
        return ("fork",) if StartMethod.FORK in available else ()
    return tuple(m for m in available if m != StartMethod.FORK) if _copied(trial) >= COPIED_PER_WORKER else ()


def start_method_words(trial: TrialResult, start_method: str | None) -> str:
    """Why :func:`start_methods_to_try` named the start methods it did at ``trial``'s config."""
    if (start_method or "fork") != StartMethod.FORK:
        return f": workers start by {start_method} here"
    return f": each worker copied {fmt_bytes(int(_copied(trial)))} of the main process's pages (copy-on-read)"


def _copied(trial: TrialResult) -> float:
    """Bytes of the main process's pages each worker copied in the trial's window (copy-on-read)."""
    return (trial.memory.workers_inherited_growth_bytes or 0) / max(1, trial.config.num_workers)


def wait_figures(trial: TrialResult) -> str:
    """``p99 7.3 ms, median 1.0 ms`` of the trial's wait for a batch; empty when it was not measured."""
    waits = trial.wait_ms
    return f"p99 {waits.p99:.1f} ms, median {waits.p50:.1f} ms" if waits and waits.p99 is not None else ""


def tail_words(trial: TrialResult) -> str:
    """``: the batches at num_workers=0 have stragglers (p99 …)`` or ``: batches reach w64 … in bursts (…)``."""
    if trial.config.num_workers == 0:
        return f": the batches at num_workers=0 have stragglers ({wait_figures(trial)})"
    return f": batches reach {trial.config.label()} in bursts (wait {wait_figures(trial)})"


GIL_RELEASED = 0.5
"""A sample that releases the GIL this share of its time or more: threads can load it side by side."""
GIL_HELD = 0.2
"""A sample that released the GIL under this share of its time in every round of the measure holds it: threads
run it one at a time, and that is the one evidence that rules thread trials out."""
STARTUP_S = 1.0
"""Seconds to a first batch from which starting worker processes is worth avoiding."""
IPC_SHARE = 0.1
"""Share of a CPU the main process spends unpickling workers' batches that counts, at the CPU ceiling."""


def gil_held(space: SearchSpace) -> bool:
    """Whether the probe's GIL measure clearly says a sample holds the GIL: even its most favourable round read
    less than :data:`GIL_HELD` (an older document without the spread: its one figure)."""
    high = space.gil_release_high if space.gil_release_high is not None else space.gil_release
    return high is not None and high < GIL_HELD


def _released(space: SearchSpace) -> str:
    """``a sample releases the GIL 30% of its time (12–64% over the measure's rounds)``; empty when not told."""
    if space.gil_release is None:
        return ""
    high = space.gil_release_high
    if gil_untold(space.gil_release, high):
        return (f"a sample's GIL share was not told ({100 * space.gil_release:.0f}–{high:.0%}: other processes kept "
                "the measure's threads waiting for a CPU)")
    spread = f" ({high:.0%} at most in a round)" if high is not None else ""
    return f"a sample releases the GIL {space.gil_release:.0%} of its time{spread}"


def thread_evidence(anchor: TrialResult, space: SearchSpace, saturated: bool, shm_blocked: str | None) -> str:
    """Why the thread twin of ``anchor`` (the process config the climb picked) is worth a trial, in words the
    search story quotes; empty only when the evidence clearly says no (:func:`gil_held`, and nothing else for
    threads). A trial costs seconds; a missed 1.5× costs the user far more, and a GIL share alone is noisy.
    ``saturated``: ``anchor`` used the CPUs up; ``shm_blocked``: why /dev/shm stopped more worker processes."""
    if space.free_threaded:
        return ": this Python runs without the GIL (free-threaded), so threads run side by side"
    reasons = []
    if space.gil_release is not None and space.gil_release >= GIL_RELEASED:
        reasons.append(_released(space))
    if _copied(anchor) >= COPIED_PER_WORKER:
        reasons.append(f"each worker copied {fmt_bytes(int(_copied(anchor)))} of the main process's pages "
                       "(copy-on-read)")
    if shm_blocked:
        reasons.append(shm_blocked)
    if (anchor.first_batch_s or 0.0) >= STARTUP_S:
        reasons.append(f"{anchor.config.label()} took {anchor.first_batch_s:.1f} s to start its workers")
    ipc = receive_share(anchor)
    if saturated and ipc >= IPC_SHARE:
        reasons.append(f"at the CPU ceiling, the main process spends {ipc:.0%} of a CPU unpickling the workers' "
                       "batches")
    if reasons:
        return ": " + "; ".join(reasons)
    if gil_held(space):
        return ""
    told = _released(space) or "the GIL share was not measured"
    return f": threads can load this dataset and nothing rules them out ({told})"


def receive_share(trial: TrialResult) -> float:
    """Share of a CPU the main process spent unpickling the workers' batches (0 when not measured)."""
    if not trial.times.receive_ms_mean or not trial.samples_per_s or not trial.batches or not trial.samples:
        return 0.0
    return trial.times.receive_ms_mean / 1000 * trial.samples_per_s / (trial.samples / trial.batches)


def no_thread_words(space: SearchSpace) -> str:
    """Why the search tried no thread config, when threads could have loaded the dataset: a sample holds the
    GIL, clearly, and nothing else called for threads."""
    return (f"; threads not tried: {_released(space)}, under the {GIL_HELD:.0%} threads need to overlap, and the "
            "worker processes showed no copy-on-read growth, /dev/shm or start-up limit, nor IPC at the CPU "
            "ceiling (--worker-kind process,thread to measure them anyway)")

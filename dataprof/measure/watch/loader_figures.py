"""One watched loader's batches as they arrive, and the figures they make: the steady state past each epoch's
warm-up, the pace of the training from the end of its start-up, the start-up apart."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataprof.measure.watch.events import BuiltLoader
from dataprof.measure.watch.recorder import MAX_RECORDED
from dataprof.results.codec import decode, encode
from dataprof.results.knobs import warmup_batches
from dataprof.results.run import LoaderRun
from dataprof.results.stats import percentile
from dataprof.results.trial import Percentiles


@dataclass
class WatchedLoader:
    """A loader's registration and its batches as they arrive: (epoch, index, wait s, step s or -1, samples)."""

    info: BuiltLoader
    rows: list[list[float]] = field(default_factory=list)
    first_batch_s: dict[int, float] = field(default_factory=dict)
    ended_at: dict[int, float] = field(default_factory=dict)
    """When each epoch that ran out ended (s on the script's clock)."""
    batch_bytes: int | None = None
    """The bytes of its first batch, told at its first epoch."""
    replayed_after: int | None = None
    """``--replay``: the batches it delivered before its replay began (None: no replay began)."""
    knobs_lost: dict[str, Any] | None = None
    """``--override``: the knobs set where it was built that it no longer had at its first iteration."""

    def spans(self) -> dict[int, tuple[float, float]]:
        """Each epoch's span on the script's clock, by epoch: from the iterator's creation to the epoch's end (its
        last batch when it did not run out)."""
        first: dict[int, list[float]] = {}
        last: dict[int, float] = {}
        for row in self.rows:
            if len(row) >= 6:
                first.setdefault(int(row[0]), row)
                last[int(row[0])] = row[5]
        return {epoch: (row[5] - self.first_batch_s.get(epoch, row[2]), self.ended_at.get(epoch, last[epoch]))
                for epoch, row in first.items()}


def loader_run(loader: WatchedLoader, others: Sequence[WatchedLoader] = ()) -> LoaderRun:
    """One loader's figures: warm-up batches of each epoch left out of the steady state, and a replayed loader's
    batches from before its replay began (they were loaded, not free); its pace without the time the ``others``
    took between its batches (a validation loader's epochs)."""
    info, replayed = loader.info, loader.replayed_after
    # replayed batches come from memory: no buffer to drain, only the first (the workers stopped) is left out
    warmup = 1 if replayed is not None else warmup_batches(info.num_workers or 0, info.prefetch_factor)
    timed = loader.rows[int(replayed or 0):]  # a replay's batches from before it began: loaded
    steady = _steady(timed, warmup)
    waits = [row[2] for row in steady]
    steps = [row[3] for row in steady]
    total = sum(waits) + sum(steps)
    epochs = len({int(row[0]) for row in loader.rows})
    starts = sum(loader.first_batch_s.values())
    warm = starts + sum(row[2] for row in loader.rows if 0 < row[1] < warmup)
    whole = starts + sum(row[2] for row in loader.rows if row[1] > 0) \
        + sum(row[3] for row in loader.rows if row[3] >= 0)
    measured = dict(
        batches=len(loader.rows), epochs=epochs, steady_batches=len(steady),
        samples_per_s=sum(row[4] for row in steady) / total if total > 0 else None,
        data_wait_fraction=sum(waits) / total if total > 0 else None,
        wait_ms=_ms_stats(waits), step_ms=_ms_stats(steps),
        first_batch_s=tuple(loader.first_batch_s[e] for e in sorted(loader.first_batch_s)),
        warmup_wait_fraction=warm / whole if whole > 0 else None,
        iterations_per_s=_pace(loader, timed, warmup, [span for other in others for span in other.spans().values()]),
        training_fraction=sum(row[6] for row in loader.rows) / len(loader.rows)
        if loader.rows and all(len(row) > 6 for row in loader.rows) else None,
        knobs_lost=loader.knobs_lost or None, batch_bytes=loader.batch_bytes, replayed_after=replayed,
        epoch_samples=tuple(int(sum(row[4] for row in loader.rows if int(row[0]) == epoch))
                            for epoch in sorted(loader.ended_at)),
    )
    return decode(LoaderRun, {**encode(info), **encode(info.factory), **measured})  # the factory's by its fields


def _steady(rows: Sequence[list[float]], warmup: int) -> list[list[float]]:
    """The steady batches' rows: past each epoch's warm-up. Where no epoch outlasts its warm-up (the loader's
    buffer holds a whole epoch, so it never reaches a steady state within one), the batches :func:`_pace` spans
    instead, every later epoch's start included, as the training lives them."""
    steady = [row for row in rows if row[1] >= warmup and row[3] >= 0]
    if steady:
        return steady
    start = _start(rows, warmup)
    return [] if start is None else [row for row in rows[start + 1:] if row[3] >= 0]


def _start(rows: Sequence[list[float]], warmup: int) -> int | None:
    """The row at the end of the start-up: the first past its epoch's warm-up (an epoch shorter than its warm-up,
    such as a peek at one batch before the training, is passed over), else, when no epoch outlasts its warm-up,
    the first of a later epoch."""
    past = next((n for n, row in enumerate(rows) if row[1] >= warmup), None)
    if past is not None:
        return past
    first_epoch = rows[0][0] if rows else None
    return next((n for n, row in enumerate(rows) if row[0] != first_epoch), None)


def _pace(loader: WatchedLoader, rows: Sequence[list[float]], warmup: int,
          elsewhere: Sequence[tuple[float, float]] = ()) -> float | None:
    """Batches per second of the training's time past the start-up (:func:`_start`). Where epochs ended after
    it, over whole epochs, as a training's own log times them: from the start of the first that starts after it
    (else from its batch) to the end of the last that ended (a partial last epoch would weigh its workers' start
    against a few of its batches); else, or where most of its batches came after that end (a long epoch the window
    cut short), from its batch to the last. The training's time is the loader's own epochs
    (:func:`_epochs`), less an epoch of another loader (``elsewhere``: its spans) during which this one delivered
    nothing (a validation pass every N steps); a span that holds one of its batches is kept (a ``zip``)."""
    if not rows or len(rows[0]) < 6:
        return None
    start = _start(rows, warmup)
    if start is None:
        return None
    epochs = _epochs(loader, elsewhere)
    ended = set(list(epochs)[:-1]) | set(loader.ended_at)  # an epoch ends where it ran out or the next began
    capped = len(loader.rows) >= MAX_RECORDED  # past the cap, an epoch's last row is not known
    last = next((n for n in range(len(rows) - 1, start - 1, -1) if int(rows[n][0]) in ended
                 and (rows[n + 1][0] != rows[n][0] if n + 1 < len(rows) else not capped)), None)
    if last is None or 2 * (last - start) < len(rows) - 1 - start:  # no epoch ended, or most batches came after
        begin, end, count = rows[start][5], rows[-1][5], len(rows) - 1 - start  # a step and a wait for each batch
    else:
        first = next((n for n in range(start, last + 1) if rows[n][1] == 0), None)
        if first is not None:  # whole epochs, from the first one's start
            begin, count = epochs[int(rows[first][0])][0], last - first + 1
        else:  # the rest of an epoch, from past the step its batch took
            step = rows[start + 1][3] if start < last and rows[start + 1][3] >= 0 else 0.0
            begin, count = rows[start][5] + step, last - start
        end = epochs[int(rows[last][0])][1]
    if count < 1 or end <= begin:
        return None
    kept = [(max(s, begin), min(e, end)) for s, e in _joined(epochs.values()) if min(e, end) > max(s, begin)]
    arrivals = [row[5] for row in rows[start:]]
    for other in elsewhere:
        if not _holds(arrivals, *other):
            kept = [piece for s, e in kept for piece in _without((s, e), other)]
    return count / max(sum(e - s for s, e in kept), 1e-9)


def _epochs(loader: WatchedLoader, elsewhere: Sequence[tuple[float, float]]) -> dict[int, tuple[float, float]]:
    """Each epoch's part of the training's time, in order: from its iterator's creation (its workers' start) to its
    end where it ran out (their stop: what the script does before its next epoch, a validation, a checkpoint, is
    not the loader's time); one the loop left before it ran out (a ``break``, or a loop that takes as many batches
    as the epoch holds, as Lightning's does) to what the script starts next, its next epoch or another loader's (a
    validation), so that the step on its last batch counts. The last epoch ends where it ran out, else at its last
    batch."""
    spans = sorted(loader.spans().items())
    found = {}
    for n, (epoch, (start, end)) in enumerate(spans):
        if n + 1 < len(spans) and epoch not in loader.ended_at:
            end = max(end, min([spans[n + 1][1][0], *(s for s, _ in elsewhere if s >= end)]))
        found[epoch] = (start, end)
    return found


def _joined(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` in order, overlapping ones joined (a loader iterated twice at once)."""
    joined: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if joined and start <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
        else:
            joined.append((start, end))
    return joined


def _without(span: tuple[float, float], other: tuple[float, float]) -> list[tuple[float, float]]:
    """What of ``span`` lies outside ``other``: none, one or two pieces."""
    (s, e), (os, oe) = span, other
    return [piece for piece in ((s, min(e, os)), (max(s, oe), e)) if piece[1] > piece[0]]


def _holds(arrivals: Sequence[float], start: float, end: float) -> bool:
    """Whether any of the sorted ``arrivals`` lies strictly between ``start`` and ``end``."""
    at = bisect.bisect_right(arrivals, start)
    return at < len(arrivals) and arrivals[at] < end


def _ms_stats(seconds: Sequence[float]) -> Percentiles | None:
    """p50, p95 and mean of ``seconds``, in milliseconds; None when empty."""
    if not seconds:
        return None
    ms = [1000.0 * s for s in seconds]
    return Percentiles(p50=percentile(ms, 50), p95=percentile(ms, 95), mean=sum(ms) / len(ms))

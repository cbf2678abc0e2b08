"""The epoch check: epochs of a tiny stream through a config's DataLoader, run in a trial's process, to see whether
the installed DataLoader survives an epoch's end with persistent workers (a trial's window seldom reaches one)."""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass

from dataprof.backends import Backend
from dataprof.backends.target import describe_exception
from dataprof.measure.protocol import error_event
from dataprof.measure.sweep.events import Progress, answer, said
from dataprof.measure.sweep.failures import Live, ThreadFailure, classify_loader_error, worker_signals
from dataprof.measure.sweep.trial import Emit, started
from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import TrialStatus

EPOCH_CHECK_ITEMS = 32
EPOCH_CHECK_BATCH = 2
EPOCH_CHECK_EPOCHS = 8
"""Every epoch's end is a chance for a racy failure to show (paddle 3.3's shows at most of them)."""


@dataclass(frozen=True)
class EpochAnswer:
    """The check's ``result`` event: the batches each epoch gave, and the batches the stream holds."""

    batches: tuple[int, ...]
    expected: int


def run_epoch_check(backend: Backend, config: LoaderConfig, emit: Emit) -> None:
    """Epochs of a tiny IterableDataset through ``config``'s DataLoader: does it survive an epoch's end?

    Persistent workers each meet the end of their share of a stream and must
    start the next epoch; a trial's window seldom reaches an epoch's end, so
    this checks the installed DataLoader itself. Emits the batches of each
    epoch, or the error. Never raises.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    live = Live()

    def report(exc: BaseException, wait_s: float = 0.0) -> None:
        status, message = classify_loader_error(exc, worker_signals(live.iterator, wait_s),
                                                backend.internal_paths)
        emit(error_event(status, message, "".join(traceback.format_exception(exc))))

    try:
        loader, _ = backend.build_loader(backend.counting_stream(EPOCH_CHECK_ITEMS), config, EPOCH_CHECK_BATCH,
                                         None, False, False)
    except Exception as exc:
        emit(error_event(TrialStatus.FAILED, describe_exception(exc), traceback.format_exc()))
        return
    failure = ThreadFailure(report).install()
    batches = []
    try:
        for _ in range(EPOCH_CHECK_EPOCHS):
            live.iterator = started(iter(loader), emit)
            batches.append(0)
            for _ in live.iterator:
                batches[-1] += 1
                emit(said(Progress()))
    except Exception as exc:
        failure.end(exc, dead_peer=True)
        return
    failure.handled.set()
    emit(answer(EpochAnswer(tuple(batches), EPOCH_CHECK_ITEMS // EPOCH_CHECK_BATCH)))

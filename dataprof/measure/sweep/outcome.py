"""A trial's outcome, read strictly: what ended it, in the fields of the TrialResult it becomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from dataprof.measure.protocol import Message, ProtocolError, TrialError, TrialFigures, read
from dataprof.measure.sweep.events import Found, Garbled, TrialExit, Word
from dataprof.results.codec import encode
from dataprof.results.knobs import LoaderConfig
from dataprof.results.trial import Percentiles, TrialResult
from dataprof.results.vocabulary import TrialStatus


def last_word(word: Word | None, end: TrialExit | Garbled, who: str) -> tuple[TrialStatus, str | None]:
    """How a forked process ended: by its last word (``word``: its answer, then ``ok``, or its error), else by how
    it exited (``end``; ``who``: what the line calls it); ``failed``, and why, where either does not follow the
    protocol."""
    if isinstance(word, Found):
        return TrialStatus.OK, None
    if isinstance(word, TrialError):
        return word.status, word.message
    garbled = word if isinstance(word, Garbled) else end if isinstance(end, Garbled) else None
    if garbled is not None:
        return TrialStatus.FAILED, broken(garbled.why)
    assert isinstance(end, TrialExit)
    return end.why(who)


def broken(why: object) -> str:
    """The one line of a trial whose last word dataprof's parent could not read."""
    return f"the trial's last word does not follow dataprof's protocol ({why}): a bug in dataprof, please report it"


Answer = TypeVar("Answer")


@dataclass(frozen=True)
class SideEnd(Generic[Answer]):
    """How a forked run (a trial; a side run: Paddle's autotune, the epoch check, the thread check) ended: its status
    and, ``ok``, its answer read strictly; else the one line of why not, and for a timeout whether its batches had
    stalled."""

    status: TrialStatus
    answer: Answer | None = None
    why: str | None = None
    stalled: bool = False


def side_end(kind: type[Answer], word: Word | None, end: TrialExit | Garbled, who: str = "it") -> SideEnd[Answer]:
    """A forked run's end from its last word (an answer of ``kind``: a trial's figures, a side run's answer) and its
    exit (``who``: what the line calls it)."""
    status, why = last_word(word, end, who)
    if not isinstance(word, Found):
        return SideEnd(status, why=why)
    try:
        return SideEnd(status, read(kind, word.fields))
    except ProtocolError as exc:
        return SideEnd(TrialStatus.FAILED, why=broken(exc))


def outcome_of(word: Word | None, end: TrialExit | Garbled, killed_for: dict[TrialStatus, str],
               resources: Message) -> Message:
    """The TrialResult's fields but its config and duration: why it was killed (``killed_for``), else the
    trial's last word (``word``), read strictly, else how its process exited (``end``); and the ``resources`` the
    sampler summarised."""
    if killed_for:
        status, error = next(iter(killed_for.items()))
        return {"status": status, "error": error, **resources}
    ended = side_end(TrialFigures, word, end, "the trial process")
    if ended.answer is None:
        return {"status": ended.status, "error": ended.why, **resources}
    return {"status": TrialStatus.OK, **resources, **measured(ended.answer)}


def measured(figures: TrialFigures) -> Message:
    """A trial's figures as TrialResult fields; its reads over its window as rates (where it counted them, they
    stand for the parent's, which cover another span)."""
    fields = {key: value for key, value in encode(figures).items() if not key.startswith("window_read_")}
    reads = {} if figures.window_read_bytes is None or figures.window_read_chars is None or figures.window_s <= 0 \
        else {"storage_read_bytes_per_s": figures.window_read_bytes / figures.window_s,
              "read_chars_per_s": figures.window_read_chars / figures.window_s}
    return {**fields, **reads, "wait_ms": Percentiles(**figures.wait_ms), "batch_marks": tuple(figures.batch_marks)}


def trial_result(config: LoaderConfig, outcome: Message) -> TrialResult:
    """The TrialResult of ``config``: every key of ``outcome`` is one of its fields (a TypeError otherwise); the
    window's reads per sample and in all, from their rates. A thread config has no worker process: its workers'
    memory is not read (null), not 0."""
    trial = TrialResult.of(config, **outcome)
    if config.threads:
        trial = trial.replaced(workers_uss_start_bytes=None, workers_uss_end_bytes=None,
                               workers_inherited_growth_bytes=None, workers_file_growth_bytes=None)
    rate, window = trial.samples_per_s, trial.window_s
    storage, chars = trial.storage.storage_read_bytes_per_s, trial.storage.read_chars_per_s
    return trial.replaced(
        storage_read_bytes=None if storage is None or window is None else round(storage * window),
        read_bytes_per_sample=storage / rate if storage is not None and rate else None,
        read_chars_per_sample=chars / rate if chars is not None and rate else None)

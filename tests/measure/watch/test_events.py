"""The events the watched script's process sends ``dataprof run``'s parent: each read back as it was written,
and a line that is not one of them refused, not read as figures left out."""

from __future__ import annotations

import json

import pytest

from dataprof.measure.protocol import ProtocolError, line_of
from dataprof.measure.watch.events import (
    EVENTS as WIRE,
)
from dataprof.measure.watch.events import (
    Batches,
    BuiltLoader,
    Device,
    Ended,
    EpochEnded,
    EpochStarted,
    Exit,
    Factory,
    LoaderBuilt,
    Overridden,
    RanksStarted,
    Replayed,
    WindowEnd,
    WindowOpen,
    heard,
    said,
)

BUILT = BuiltLoader("train.py:41", "Images", "data", "data.py", "DataLoader", "torch", 32, 2, 2, True, False,
                    split="train", built_by=("timm.data:create_loader",), factory=Factory("train.py:make", ("n=3",)))
EVENTS = (LoaderBuilt(0, BUILT), Batches(0, [[1, 0, 0.01, -1.0, 8, 3.5, 1]]),
          EpochStarted(0, 1, 0.4, (812, 813), 96_000), EpochEnded(0, 1, 9.5), WindowOpen(), WindowEnd(),
          Device("cuda:0", "GPU-abc", "00000000:01:00.0", "H100"), Ended("--max-steps 40 reached"),
          RanksStarted("torch.multiprocessing.spawn", 2, "train.py:310"), Replayed(0, 16),
          Overridden(1, {"0": {"num_workers": 0}}), Exit(1, ("Traceback", "ValueError: x"), ("bus error",)))


def test_every_event_is_read_back_as_it_was_written_through_a_line() -> None:
    assert {type(event) for event in EVENTS} == set(WIRE.kinds.values())
    for event in EVENTS:
        assert heard(json.loads(line_of(said(event)))) == event


def test_a_line_that_is_no_event_of_the_watch_is_refused() -> None:
    with pytest.raises(ProtocolError, match="unknown event"):
        heard({"ev": "epochs", "loader": 0})
    with pytest.raises(ProtocolError, match="unknown event"):
        heard({"loader": 0})
    with pytest.raises(ProtocolError, match="first_batch"):
        heard({"ev": "epoch", "loader": 0, "epoch": 1, "first_batch": 0.4})  # a key misspelt on one side
    with pytest.raises(ProtocolError):
        heard({"ev": "exit", "code": "1"})  # a code of another kind

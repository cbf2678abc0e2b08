"""What a trial's death by a signal usually means, told to the reader beside the measured fact."""

from __future__ import annotations

from dataprof.decide.crashes import MEANINGS, explained


def test_a_death_by_a_known_signal_is_explained_once_and_other_errors_are_left_as_they_are() -> None:
    said = explained("a DataLoader worker died by SIGKILL")
    assert said == f"a DataLoader worker died by SIGKILL: {MEANINGS['SIGKILL']}"
    assert explained(said) == said  # a document written when the meaning was part of the error
    assert explained("the trial process died by SIGABRT") == "the trial process died by SIGABRT"
    assert explained("boom") == "boom" and explained(None) is None

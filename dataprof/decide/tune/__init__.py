"""``dataprof tune``'s decisions (pure): the next run of the training to try (``search``), the answer from the
runs (``answer``), why tried configs failed (``causes``), and a run of the training as a trial (``runs``)."""

from dataprof.decide.tune.answer import band, decide_tune, noise_of
from dataprof.decide.tune.runs import (
    loader_of,
    loader_sweep_of,
    others_note,
    sweep_target,
    trial_of,
    trial_of_ranks,
    tuned_loader,
)
from dataprof.decide.tune.search import confirm_run, next_run, replay_batches, run_limits

__all__ = ["band", "confirm_run", "decide_tune", "loader_of", "loader_sweep_of", "next_run", "noise_of",
           "others_note", "replay_batches", "run_limits", "sweep_target", "trial_of", "trial_of_ranks", "tuned_loader"]

"""``dataprof tune``'s decisions (pure): the next run of the training to try (``search``), the answer from the
runs (``answer``), the noise they are compared at (``noise``), why tried configs failed (``causes``), and a run of
the training as a trial (``runs``)."""

from dataprof.decide.tune.answer import decide_tune
from dataprof.decide.tune.limits import replay_batches, run_limits, runs_left
from dataprof.decide.tune.noise import band, noise_of
from dataprof.decide.tune.runs import (
    loader_of,
    loader_sweep_of,
    others_note,
    sweep_target,
    trial_of,
    trial_of_ranks,
    tuned_loader,
)
from dataprof.decide.tune.search import confirm_run, next_run

__all__ = ["band", "confirm_run", "decide_tune", "loader_of", "loader_sweep_of", "next_run", "noise_of",
           "others_note", "replay_batches", "run_limits", "runs_left", "sweep_target", "trial_of", "trial_of_ranks",
           "tuned_loader"]

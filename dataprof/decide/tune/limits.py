"""How long ``dataprof tune``'s runs may take (pure): the batches the headspace keeps before its window, how many
more runs the budget holds, and each run's limits."""

from __future__ import annotations

import statistics

from dataprof.results.tune import TuneReport

REPLAY_MOST = 16
"""Batches the headspace run keeps at most (its replay then gives them again in turn)."""
REPLAY_LEAST = 2


def replay_batches(report: TuneReport, window_s: float | None) -> int:
    """Batches the headspace run keeps before its replay begins: as many as the script's own config delivers in a
    quarter of the window, :data:`REPLAY_LEAST` to :data:`REPLAY_MOST` (a slow step keeps few, so the replay
    begins; its window opens when the replay does)."""
    current = report.by_role("current")
    rate_now = current[0].iterations_per_s if current else None
    if not rate_now or window_s is None:
        return REPLAY_MOST
    return int(max(REPLAY_LEAST, min(REPLAY_MOST, rate_now * window_s / 4)))


def runs_left(report: TuneReport, elapsed_s: float, budget_s: float) -> int:
    """How many more runs fit in the budget, each taking as long as the runs so far took (their median wall
    time, the failed ones too): a run starts only when it is expected to end within the budget."""
    walls = [t.wall_s for t in report.trials if t.wall_s > 0]
    if not walls:
        return 1 if elapsed_s < budget_s else 0
    return max(0, int((budget_s - elapsed_s) // statistics.median(walls)))


FIRST_START_S = 300.0
"""The first run's start-up allowance (imports, building the dataset and the model) before its window."""
START_FACTOR = 3.0
"""A later run's start-up allowance: this many times the first run's, plus :data:`START_SLACK_S`."""
START_SLACK_S = 60.0
WINDOW_FACTOR = 3.0
"""A run's limit holds this many windows (``--trial-seconds``) after its start-up allowance."""
LIMIT_GRACE_S = 30.0


def run_limits(report: TuneReport, window_s: float | None,
               first_start_s: float = FIRST_START_S) -> dict[str, float | None]:
    """A run's limits: ``limit_s``, its start-up allowance (the first run's: ``first_start_s``; later ones:
    :data:`START_FACTOR` times the first run's start-up, plus :data:`START_SLACK_S`, twice as long after each run
    that saw no training within it, up to the first run's) + :data:`WINDOW_FACTOR` × the window +
    :data:`LIMIT_GRACE_S`; ``startup_s``, that allowance; and ``after_window_s``, how long it may take to end once
    its window ended (the window, 10 s at least)."""
    window = window_s or 10.0
    first = report.trials[0] if report.trials else None
    startup = first_start_s
    if first is not None and first.ok:
        startup = START_FACTOR * max(0.0, first.wall_s - window) + START_SLACK_S
        unseen = 0
        for trial in reversed(report.trials):  # an evaluation longer than the allowance: the next allows for it
            if not trial.no_training:
                break
            unseen += 1
        startup = min(max(first_start_s, startup), startup * 2 ** unseen)
    return {"limit_s": startup + WINDOW_FACTOR * window + LIMIT_GRACE_S, "startup_s": startup,
            "after_window_s": max(10.0, window)}

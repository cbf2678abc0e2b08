"""What the trials say about the knobs beyond the worker count, in words the search story quotes: the wait
figures behind a deeper buffer or ``in_order=False``, and the start methods worth a trial."""

from __future__ import annotations

from collections.abc import Sequence

from dataprof.model import TrialResult
from dataprof.units import fmt_bytes

COPIED_PER_WORKER = 8 * 1024 * 1024
"""Copy-on-read growth per worker (in the window) from which the other start methods are worth a try."""


def start_methods_to_try(trial: TrialResult, start_method: str | None, available: Sequence[str]) -> tuple[str, ...]:
    """The start methods worth one trial at ``trial``'s config: under a default other than fork (Python 3.14's
    forkserver, spawn), fork when it is offered: it starts workers without pickling the dataset into each;
    under fork, the others only when the workers copied the main process's pages (copy-on-read), where a
    worker holding its own unpickled copy can weigh less. Fork starts workers fastest, so a slow start under
    fork is no reason to try the others."""
    if (start_method or "fork") != "fork":
        return ("fork",) if "fork" in available else ()
    return tuple(m for m in available if m != "fork") if _copied(trial) >= COPIED_PER_WORKER else ()


def start_method_words(trial: TrialResult, start_method: str | None) -> str:
    """Why :func:`start_methods_to_try` named the start methods it did at ``trial``'s config."""
    if (start_method or "fork") != "fork":
        return f": workers start by {start_method} here"
    return f": each worker copied {fmt_bytes(int(_copied(trial)))} of the main process's pages (copy-on-read)"


def _copied(trial: TrialResult) -> float:
    """Bytes of the main process's pages each worker copied in the trial's window (copy-on-read)."""
    return (trial.workers_inherited_growth_bytes or 0) / max(1, trial.config.num_workers)


def wait_figures(trial: TrialResult) -> str:
    """``p99 7.3 ms, median 1.0 ms`` of the trial's wait for a batch; empty when it was not measured."""
    waits = trial.wait_ms
    return f"p99 {waits.p99:.1f} ms, median {waits.p50:.1f} ms" if waits and waits.p99 is not None else ""


def tail_words(trial: TrialResult) -> str:
    """``: the batches at num_workers=0 have stragglers (p99 …)`` or ``: batches reach w64 … in bursts (…)``."""
    if trial.config.num_workers == 0:
        return f": the batches at num_workers=0 have stragglers ({wait_figures(trial)})"
    return f": batches reach {trial.config.label()} in bursts (wait {wait_figures(trial)})"

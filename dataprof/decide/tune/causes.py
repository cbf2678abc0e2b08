"""Why the tried configs of ``dataprof tune`` failed, when they failed for one cause (pure): the cause named from
what the runs' errors say and the lines of their stderr that name one (wherever they stood), with what to
change."""

from __future__ import annotations

from collections.abc import Callable

from dataprof.results.knobs import KnobValues
from dataprof.results.tune import CAUSE_WORDS, TunedLoader, TuneReport, TuneTrial
from dataprof.results.units import fmt_bytes

Explain = Callable[[TuneTrial, TunedLoader | None], str]


def _shm(trial: TuneTrial, loader: TunedLoader | None) -> str:
    """/dev/shm too small: what the config needs there, and what there is."""
    settings = (loader.settings if loader else KnobValues()) | trial.config
    workers, prefetch = settings.workers, int(settings.in_effect("prefetch_factor"))
    batch = loader.batch_bytes if loader else None
    need = f"{workers} workers × {prefetch} batches × {fmt_bytes(batch)} = {fmt_bytes(workers * prefetch * batch)}" \
        if batch and workers else "its workers' batches in flight"
    have = f", which has {fmt_bytes(loader.shm_free_bytes)} free" if loader and loader.shm_free_bytes else ""
    return (f"/dev/shm is too small for the batches in flight: {need} in /dev/shm{have}; give it more (docker run "
            "--shm-size=2g, a Kubernetes emptyDir of medium Memory), or fewer workers or a lower prefetch_factor")


EXPLAINED: dict[str, Explain] = {
    "shm": _shm,
    "open files": lambda trial, loader: "too many open files: raise the limit (ulimit -n) or set "
                                        "torch.multiprocessing.set_sharing_strategy('file_system')",
    "memory": lambda trial, loader: "out of memory: each worker holds its own copy of the dataset; fewer workers",
    "its files": lambda trial, loader: "the script refuses to write over what an earlier run wrote: give each run "
                                       "its own directory (--workdir DIR), or skip the write when DATAPROF_TRIAL is "
                                       "set",
    "limit": lambda trial, loader: "the script did not end after its window (a thread or loop that never stops): "
                                   "see docs/tune.md#a-limit-on-every-run",
}
"""What to say of each cause of :data:`~dataprof.results.tune.CAUSE_WORDS`."""


def cause_of(trial: TuneTrial) -> str | None:
    """The name of the cause ``trial`` failed for; None when its words match none."""
    text = " ".join((trial.error or "", *trial.stderr_causes, *trial.stderr_tail)).lower()
    return next((name for name, words in CAUSE_WORDS.items() if any(word in text for word in words)), None)


def failure_cause(report: TuneReport) -> str | None:
    """The one cause every failed run shares (those of the tried configs, the headspace, yours again), named with
    its fix; None when they share none (or none failed)."""
    failed = [t for t in report.trials if not t.ok]
    causes = {cause_of(t) for t in failed}
    name = causes.pop() if len(causes) == 1 else None
    if name is None:
        return None
    explain = EXPLAINED[name]
    settings = report.loader.settings if report.loader else KnobValues()
    least = min(failed, key=lambda t: (settings | t.config).workers or 1 << 30)
    return f"every run that failed ({len(failed)}) failed for one cause: {explain(least, report.loader)}"

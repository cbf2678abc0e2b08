"""``dataprof tune``'s refinements (pure): the knobs tried after the worker climb, one run each, on top of the
config leading then, or of the fastest with workers where none leads (:data:`REFINE`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataprof.decide.tune.cost import without_idle_knobs
from dataprof.decide.tune.memory import over_memory
from dataprof.decide.tune.noise import Key, Runs, bounds, key, key_of, pooled_noise, rate, rates
from dataprof.decide.workers import CLIMB_TOP
from dataprof.results.knobs import KnobValues
from dataprof.results.registry import REGISTRY, Knob
from dataprof.results.tune import TunedLoader, TuneReport, TuneTrial
from dataprof.results.vocabulary import StartMethod, WorkerKind

REFINE: dict[str, Callable[[Any, TunedLoader], Any]] = {
    # doubled: rides out a slow batch
    "prefetch_factor": lambda now, loader: 2 * now,
    # the workers' start skipped at every epoch, where the loader has the knob (a nodes pipeline has not)
    "persistent_workers": lambda now, loader: None if now or "persistent_workers" not in loader.settings else True,
    # a faster copy to a GPU, at the cost of a pinning thread: tried only on a GPU
    "pin_memory": lambda now, loader: True if loader.device.startswith("cuda") and not now else None,
    # workers started by fork start faster, without the dataset pickled into each
    "multiprocessing_context": lambda now, loader: StartMethod.FORK.value
    if now and now != StartMethod.FORK and StartMethod.FORK in loader.start_methods else None,
    # threads pass batches without pickling and hold no copies, but share the step's interpreter lock
    "worker_kind": lambda now, loader: WorkerKind.THREAD.value if loader.threads and now != WorkerKind.THREAD
    else None,
}
"""What tune tries of a knob, by its name: the value, from the value in effect on top of the config leading (the
loader's own default where neither the script nor the config sets it) and the loader tuned (None: nothing to try
there). A knob not here is not refined (``in_order`` changes the order the training sees its batches, which is
the user's call)."""

WORKER_COST = ("persistent_workers", "multiprocessing_context", "worker_kind")
"""The refinements that change what workers cost (their start at every epoch, how they start, processes or
threads): where the config leading has no workers they are tried on top of the fastest config with workers, as
they can make workers pay where the climb found them not to (short epochs that start workers anew, a dataset
pickled into each spawned worker)."""


def refinements() -> tuple[Knob, ...]:
    """The knobs tried after the worker climb, one run each, in the registry's order: those :data:`REFINE` has a
    value for."""
    return tuple(k for k in REGISTRY if k.name in REFINE)


def as_changed(config: KnobValues, settings: KnobValues) -> KnobValues:
    """``config`` without the knobs the script sets to the same values (a run's overrides), and without those
    that need workers when it has none."""
    return without_idle_knobs(config.apart_from(settings))


def refined(config: KnobValues, report: TuneReport) -> bool:
    """Whether ``config`` sets a knob of :func:`refinements` its own way (not the script's, nor the loader-only
    sweep's pick): that knob has been tried."""
    picked = (report.loader_sweep.config if report.loader_sweep is not None else None) or KnobValues()
    return any(k.name in config and picked.get(k.name) != config[k.name] for k in refinements())


def refinement(report: TuneReport, seen: set[Key]) -> KnobValues | None:
    """The first of :func:`refinements` no run has set its own way yet, on top of the config leading so far when
    that has workers (else of :data:`WORKER_COST`, on top of the fastest config with workers), where the knob has
    a value to try there (on threads, a knob a thread loader has); None when none is left."""
    assert report.answer is not None and report.answer.leading is not None and report.loader is not None
    leading = report.trials[report.answer.leading].config
    workers = (report.loader.settings | leading).workers
    fastest = None if workers else _fastest_with_workers(report, rates(report.trials))
    base, knobs = (leading, refinements()) if fastest is None else \
        (fastest[0][1].config, tuple(k for k in refinements() if k.name in WORKER_COST))
    if not (report.loader.settings | base).workers:
        return None
    settings = report.loader.settings | base
    threads = settings.threads
    for record in knobs:
        knob = record.name
        if (threads and not record.threads and record.name != "worker_kind") or \
                any(refined(KnobValues({knob: t.config[knob]}), report) for t in report.trials if knob in t.config):
            continue  # a knob a thread loader does not have is no change on threads
        value = REFINE[knob](settings.in_effect(knob), report.loader)
        config = as_changed(base | {knob: value}, report.loader.settings)
        if value is not None and key(config) not in seen:
            return config
    return None


def _fastest_with_workers(report: TuneReport, by_config: dict[Key, Runs], cost_knob: bool = False) -> Runs | None:
    """The runs (of ``by_config``: the runs by config) of the config with workers (for every node alike) that went
    fastest; with ``cost_knob``, of those of worker processes that set a knob of :data:`WORKER_COST` their own way.
    None when none ran."""
    assert report.loader is not None
    settings = report.loader.settings

    def counts(trial: TuneTrial) -> bool:
        config = settings | trial.config
        return bool(config.workers) and not trial.node_knobs and (not cost_knob or (not config.threads and any(
            k in trial.config and refined(KnobValues({k: trial.config[k]}), report) for k in WORKER_COST)))

    return max((runs for runs in by_config.values() if counts(runs[0][1])), key=rate, default=None)


def cost_climb(report: TuneReport, seen: set[Key]) -> KnobValues | None:
    """Where no workers lead: twice the workers of the fastest config of worker processes that sets a knob of
    :data:`WORKER_COST` its own way (persistent workers, say), while its runs are not shown slower than the config
    leading: that knob gives the workers a curve of their own, which the climb from none never walked (dcgan's
    persistent workers: two as fast as none, eight 18% faster). None when none is left to double."""
    assert report.answer is not None and report.answer.leading is not None and report.loader is not None
    settings, leading = report.loader.settings, report.trials[report.answer.leading]
    if (settings | leading.config).workers:
        return None
    by_config = rates(report.trials)
    best, lead = _fastest_with_workers(report, by_config, cost_knob=True), by_config[key_of(leading)]
    if best is None:
        return None
    workers = 2 * (settings | best[0][1].config).workers
    more = as_changed(best[0][1].config | {"num_workers": workers}, settings)
    if bounds(pooled_noise(report.trials), best, lead)[1] < 0 or workers > CLIMB_TOP or key(more) in seen or \
            over_memory(report, workers) is not None:
        return None
    return more

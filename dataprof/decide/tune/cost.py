"""What a config of ``dataprof tune`` costs (pure), as the sweep's configs cost (``decide.cost``): its workers on
every node, its prefetch, the knobs it changes in the script, its memory; among configs the runs show as fast, the
answer takes the cheapest (``answer``)."""

from __future__ import annotations

from dataprof.decide.cost import Cost
from dataprof.decide.cost import cost as shared_cost
from dataprof.decide.tune.noise import Runs
from dataprof.results.knobs import KnobValues
from dataprof.results.registry import REGISTRY


def node_workers(config: KnobValues, knobs: KnobValues) -> int:
    """The workers of a node whose own ``knobs`` sit on top of ``config`` (the knobs the loader has)."""
    return (config | knobs).workers


def cost(runs: Runs, settings: KnobValues, nnodes: int = 1) -> Cost:
    """What a config costs (:class:`~dataprof.decide.cost.Cost`): threads in place of the script's worker
    processes first (new code: never cheaper), then its workers on every node together, its prefetch, the knobs
    it changes in the script (a node's own counted once more), its memory."""
    trial = runs[0][1]
    config = settings | trial.config
    workers = config.workers * (nnodes - len(trial.node_knobs)) + \
        sum(node_workers(config, knobs) for knobs in trial.node_knobs.values())
    return shared_cost(config, trial.config, workers, trial.peak_memory_bytes, len(trial.node_knobs),
                       asks_code(runs, settings))


def asks_code(runs: Runs, settings: KnobValues) -> bool:
    """Whether a config puts threads in place of the script's worker processes: a new loader in its code, not a
    knob."""
    return runs[0][1].config.threads and not settings.threads


def without_idle_knobs(config: KnobValues) -> KnobValues:
    """``config`` without the knobs that need workers when it sets ``num_workers=0`` (a config that sets no count
    keeps the script's)."""
    idle = REGISTRY.idle(config.workers) if "num_workers" in config else set()
    return KnobValues({k: v for k, v in config.items() if k not in idle}) if idle else config


def cost_of(rate_now: float | None, ceiling: float | None) -> float | None:
    """``1 − rate ÷ ceiling``: what data loading costs the training (0 when it is at its ceiling)."""
    return None if not rate_now or not ceiling else max(0.0, 1 - rate_now / ceiling)

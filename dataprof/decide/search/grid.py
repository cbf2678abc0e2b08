"""The grid strategy: every config of the space, baseline first."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from dataprof.decide.search.common import Budget, Proposal, Searching
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.registry import REGISTRY
from dataprof.results.space import SearchSpace
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import WorkerKind


class GridStrategy(Searching):
    """Every config of the space, baseline first, in a stable order; then the rules of thumb."""

    name = "grid"

    def __init__(self, space: SearchSpace, budget: Budget | None = None, rules: bool = True,
                 autotune: int | None = None, current: LoaderConfig | None = None) -> None:
        super().__init__(space, budget, rules, autotune, current)
        self.configs = grid_configs(space)

    def propose(self, history: Sequence[TrialResult]) -> Proposal:
        """The baseline, the user's settings, the next config of the grid not yet measured, then the
        rules-of-thumb comparisons, then a stop."""
        done = {trial.config for trial in history}
        mine = self._current_step(done) if self.configs[0] in done else None
        if mine is not None:
            return mine
        config = next((c for c in self.configs if c not in done), None)
        if config is not None:
            return Proposal(config, "baseline" if config == baseline(self.space.framework) else "grid")
        return self._rule_of_thumb_step(history) or \
            Proposal(None, "every config of the grid ran")

    def total(self) -> int | None:
        """The configs of the grid, the user's settings, and the comparisons measured after them."""
        mine = int(self.current is not None and self.current not in self.configs)
        return len(self.configs) + mine + len(self.comparisons())


def grid_configs(space: SearchSpace) -> list[LoaderConfig]:
    """Every configuration of the space, baseline first, without duplicates.

    ``prefetch_factor``, ``persistent_workers`` and Paddle's ``use_shared_memory``
    only exist with workers, so ``num_workers=0`` runs once per ``pin_memory``
    (PyTorch) or ``use_buffer_reader`` (Paddle) value. The baseline
    (the framework's default loader) is always included. Each ``--worker-kind`` given is swept at every count.
    """
    configs: list[LoaderConfig] = [baseline(space.framework)]
    knobs = sorted((k for k in REGISTRY if k.keyword), key=lambda k: k.grid_rank)
    product = itertools.product(sorted(set(space.workers)), *(space.values_of(k) or (k.held,) for k in knobs),
                                space.worker_kinds or (WorkerKind.PROCESS,))
    for workers, *values, kind in product:
        configs.append(space.config(workers, thread=kind == WorkerKind.THREAD,
                                    **{knob.name: value for knob, value in zip(knobs, values, strict=True)}))
    return list(dict.fromkeys(configs))

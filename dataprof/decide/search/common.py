"""What every strategy shares: a proposal, the budget a proposal must fit, the rules of thumb measured for
comparison, the state both strategies hold, a config measured twice pooled as one trial, and how a search's steps
are chained (``first_of``: tune's too)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dataprof.decide.budgets import HEADROOM, memory_fit, shm_fits, shm_in_flight
from dataprof.results.environment import DatasetInfo, Environment, ProbeReply
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import REGISTRY
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import TrialStatus

PREFERRED: dict[str, Callable[[SearchSpace], Any]] = {
    "prefetch_factor": lambda space: 2, "persistent_workers": lambda space: True,
    "use_shared_memory": lambda space: True, "use_buffer_reader": lambda space: True,
    "pin_memory": lambda space: True, "in_order": lambda space: True,
    "multiprocessing_context": lambda space: space.start_method,
}
"""The value of a knob the worker climb takes where the space holds it, by the knob's name (a knob not here, or a
value the space does not hold: the space's least value, or its first)."""


def climb_config(space: SearchSpace, workers: int) -> LoaderConfig:
    """The config the worker climb measures at ``workers``: each knob at :data:`PREFERRED`'s value."""
    chosen: dict[str, Any] = {}
    for knob in REGISTRY:
        values = space.values_of(knob)
        preferred = PREFERRED[knob.name](space) if knob.name in PREFERRED else None
        chosen[knob.name] = preferred if preferred in values or not values else \
            min(values) if knob.values == "ints" else values[0]
    return space.config(workers, thread=space.only_threads, **chosen)


@dataclass(frozen=True)
class Proposal:
    """The next config to measure (None: stop) and the reason, in words the report prints."""

    config: LoaderConfig | None
    why: str
    repeat: bool = False
    """Measure a config already measured again; its figures then pool both trials (``pooled``)."""
    rival: TrialResult | None = None
    """The trial the decision weighs this one against (does it beat it?): the trial may stop as soon as it is
    slower beyond the noise, which settles the decision. None: it runs to its full precision."""
    either_way: bool = False
    """Whether being faster beyond the noise settles the decision too (a climb: the climb goes on)."""


@dataclass(frozen=True)
class Budget:
    """What the machine allows, known before a trial runs; memory per worker comes from the trials."""

    usable_cpus: int = 1
    memory_bytes: int | None = None
    """The tree's PSS limit (--memory-limit): a trial over it is killed."""
    shm_free_bytes: int | None = None
    batch_bytes: int | None = None
    batch_tensors: int | None = None
    open_files: int | None = None
    """Soft open-file limit; it binds when tensors are shared through file descriptors."""
    shares_fds: bool = True
    saturated_cpu: float = 0.9
    """Tree CPU use, as a share of the usable CPUs, from which the climb goes one rung at a time."""
    fds_per_worker: int = 4
    """Pipes and the process sentinel the main process holds for each worker."""

    def shm_forbids(self, config: LoaderConfig) -> str | None:
        """Why the batches ``config`` keeps in flight would not fit in /dev/shm; None if they fit or go elsewhere
        (no workers, or Paddle's ``use_shared_memory=False``)."""
        if self.shm_free_bytes is None or not self.batch_bytes \
                or shm_fits(config, self.batch_bytes, self.shm_free_bytes):
            return None
        need = shm_in_flight(config, self.batch_bytes)
        return (f"w{config.num_workers} would keep {fmt_bytes(need)} of batches in /dev/shm, "
                f"which has {fmt_bytes(self.shm_free_bytes)} free")

    def forbids(self, config: LoaderConfig, history: Sequence[TrialResult]) -> str | None:
        """Why ``config`` would not fit, from what is known; None if it may run (threads share the one process's
        memory and hold no /dev/shm nor pipes: the budget's rules are the worker processes')."""
        workers = config.num_workers
        if workers == 0 or config.threads:
            return None
        in_flight = workers * config.prefetch
        shm = self.shm_forbids(config)
        if shm is not None:
            return shm
        if self.shares_fds and self.open_files:
            need = in_flight * (self.batch_tensors or 1) + workers * self.fds_per_worker
            if need > HEADROOM * self.open_files:
                return f"w{workers} would hold ~{need} open files; the limit is {self.open_files} (ulimit -n)"
        fit = memory_fit([t for t in history if t.status == TrialStatus.OK])
        if self.memory_bytes and fit is not None and fit.at(workers) > HEADROOM * self.memory_bytes:
            return (f"w{workers} would need ~{fit.at(workers) / 1e9:.1f} GB (measured {fit.per_worker / 1e6:.0f} "
                    f"MB per worker); the memory limit is {self.memory_bytes / 1e9:.1f} GB")
        return None


RULE_OF_THUMB_NAMES = ("0.75 × usable CPUs", "usable CPUs − 1")
AUTOTUNE_RULE = "Paddle autotune"


def rules_of_thumb(usable_cpus: int, space: SearchSpace,
                   autotune: int | None = None) -> list[tuple[str, LoaderConfig]]:
    """What common advice picks: ``0.75 × CPUs`` and ``CPUs − 1`` workers, pinned (PyTorch, with a GPU) and
    persistent where the space allows, the other knobs at their defaults (the start method the space climbs
    with: one the user gave alone); and ``autotune``, the worker count Paddle's own autotune picked, with
    ``paddle.io.DataLoader``'s defaults (it changes nothing else)."""
    pin = True in space.pin_memory
    persistent = True in space.persistent_workers
    prefetch = 2 if 2 in space.prefetch_factors else min(space.prefetch_factors)
    counts = (max(1, int(0.75 * usable_cpus + 0.5)), max(1, usable_cpus - 1))
    context = climb_config(space, 1).multiprocessing_context
    rules = [(name, space.config(count, pin_memory=pin, prefetch_factor=prefetch, persistent_workers=persistent,
                                 multiprocessing_context=context or space.start_method))
             for name, count in zip(RULE_OF_THUMB_NAMES, counts, strict=True)]
    if autotune is not None:
        rules.append((AUTOTUNE_RULE, space.config(autotune, prefetch_factor=2, persistent_workers=False)))
    return rules


class Strategy(Protocol):
    """A search strategy: ``propose(history)`` gives the next config to measure (None: stop) and why."""
    name: str

    def propose(self, history: Sequence[TrialResult]) -> Proposal:
        """The next config to measure and why, or a Proposal without a config to stop."""

    def total(self) -> int | None:
        """How many trials the search will run, when known in advance."""


class Climb(Protocol):
    """What a step of the adaptive climb reads of the climb (``adaptive.AdaptiveStrategy``): its space, budget,
    baseline and worker ladder, its config at a worker count, the pick so far, and its judgements of a gain and of
    CPUs used up."""

    space: SearchSpace
    budget: Budget
    baseline: LoaderConfig
    ladder: list[int]

    def climb_config(self, workers: int) -> LoaderConfig:
        """The climb's config at ``workers``."""

    def climb_pick(self, done: dict[LoaderConfig, TrialResult]) -> TrialResult | None:
        """The climbing config the recommendation would take."""

    def gains(self, trial: TrialResult, best: TrialResult) -> bool:
        """``trial`` is faster than ``best`` beyond the noise between them."""

    def saturated(self, trial: TrialResult) -> bool:
        """``trial`` used most of the CPUs it had."""


class ClimbStep:
    """A step of the adaptive climb over the climb it reads (:class:`Climb`): ``propose(done, history)`` is the
    next config it would measure, or None when it has none (the climb then asks its next step)."""

    def __init__(self, climb: Climb) -> None:
        self.climb = climb
        self.space = climb.space

    def propose(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """The next config this step would measure, and why; None when it has none."""
        raise NotImplementedError


P = TypeVar("P")


def first_of(steps: Iterable[Callable[..., P]], *state: Any) -> P | None:
    """What the first of ``steps`` proposes, each asked in turn with the search's ``state`` (None: none has
    anything): how both engines chain their steps, the sweep's climb (``AdaptiveStrategy.propose``) and tune's
    runs (``tune.search.next_run``)."""
    return next((proposal for step in steps if (proposal := step(*state)) is not None), None)


class Searching:
    """What both strategies hold: the space, the budget, and the comparisons measured at the end."""

    def __init__(self, space: SearchSpace, budget: Budget | None = None, rules: bool = True,
                 autotune: int | None = None, current: LoaderConfig | None = None) -> None:
        self.space = space
        self.budget = budget or Budget()
        self.rules = rules
        self.autotune = autotune
        """The worker count Paddle's autotune picked, measured with the rules of thumb."""
        self.current = current
        """The user's own settings (a DataLoader target's, or ``--current``): measured right after the baseline."""

    def _current_step(self, done: Collection[LoaderConfig]) -> Proposal | None:
        if self.current is None or self.current in done:
            return None
        return Proposal(self.current, f"your settings ({self.current.label()}), measured like the baseline")

    def comparisons(self) -> list[tuple[str, LoaderConfig]]:
        """How many trials the search compared so far."""
        return rules_of_thumb(self.budget.usable_cpus, self.space, self.autotune) if self.rules else []

    def _rule_of_thumb_step(self, history: Sequence[TrialResult],
                            rival: TrialResult | None = None) -> Proposal | None:
        """The next rule-of-thumb config not yet measured; ``rival``: the best so far, which it is compared with."""
        done = {t.config for t in history}
        for name, config in self.comparisons():
            if config not in done and self.budget.forbids(config, history) is None:
                return Proposal(config, f"rule of thumb ({name}), measured for comparison", rival=rival)
        return None


QUIETER = 2.0
"""A reading whose spread is this many times smaller than the other's settles a re-measure by itself."""


def pooled(first: TrialResult, again: TrialResult) -> TrialResult:
    """One config measured twice, as one trial (``repeats`` counts both).

    A reading far quieter than the other (its spread :data:`QUIETER` times smaller: the other was taken
    while something else ran) stands for both. Two alike pool their windows: the samples of both over their
    time, with a spread of at least half their relative difference (what separated them is noise too). A
    re-measure that did not complete leaves the first figures.
    """
    repeats = first.repeats + again.repeats
    readings = [t for t in (first, again)
                if t.status == TrialStatus.OK and t.samples_per_s and t.window_s and t.samples]
    if len(readings) < 2:
        return dataclasses.replace(readings[0] if readings else first, repeats=repeats)
    spread = {id(t): t.samples_per_s_spread or 0.0 for t in readings}
    quiet = min(readings, key=lambda t: spread[id(t)])
    loud = max(readings, key=lambda t: spread[id(t)])
    if spread[id(loud)] > QUIETER * spread[id(quiet)]:
        return dataclasses.replace(quiet, repeats=repeats)
    window = (first.window_s or 0.0) + (again.window_s or 0.0)
    rate_ = ((first.samples or 0) + (again.samples or 0)) / window
    errors = [(t.window_s or 0.0) * spread[id(t)] * (t.samples_per_s or 0.0) for t in readings]
    within = math.sqrt(sum(e * e for e in errors)) / window / rate_
    a, b = (first.samples_per_s or 0.0), (again.samples_per_s or 0.0)
    return dataclasses.replace(again, samples_per_s=rate_, samples_per_s_spread=max(within, abs(a - b) / (a + b)),
                               samples=(first.samples or 0) + (again.samples or 0), window_s=window,
                               batches=(first.batches or 0) + (again.batches or 0), repeats=repeats)


def search_budget(settings: SweepSettings, environment: Environment, dataset: DatasetInfo | None,
                  reply: ProbeReply) -> Budget:
    """The limits a proposal must fit: memory limit, /dev/shm, open files (with fd sharing)."""
    return Budget(
        usable_cpus=environment.usable_cpus,
        memory_bytes=settings.memory_limit_bytes,
        shm_free_bytes=None if environment.shm_free_bytes is None else  # the node's ranks share /dev/shm
        environment.shm_free_bytes // environment.local_world_size,
        batch_bytes=dataset.batch_bytes if dataset else None,
        batch_tensors=dataset.batch_tensors if dataset else None,
        open_files=environment.open_files_limit,
        shares_fds=reply.sharing_strategy == "file_descriptor",
    )

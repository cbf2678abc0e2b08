"""Search strategies: pure functions from the trials so far to the next config and why.

``grid`` measures every config of the space. ``adaptive`` (the default) climbs
``num_workers`` while the gain beats the measurement noise, refines around the
peak, tunes the other knobs only at the best worker count, and never proposes
a config the memory, ``/dev/shm`` or open-file budget forbids. Both end by
measuring what the common rules of thumb would pick, so every report can say
what following them would have cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from dataprof.config import LoaderConfig, SearchSpace, baseline, grid_configs
from dataprof.model import TrialResult
from dataprof.stats import HEADROOM, available_cpus, memory_fit, noise_between, shm_fits, shm_in_flight
from dataprof.units import fmt_bytes


@dataclass(frozen=True)
class Proposal:
    """The next config to measure (None: stop) and the reason, in words the report prints."""

    config: LoaderConfig | None
    why: str


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
        """Why ``config`` would not fit, from what is known; None if it may run."""
        workers = config.num_workers
        if workers == 0:
            return None
        in_flight = workers * (config.prefetch_factor or 2)
        shm = self.shm_forbids(config)
        if shm is not None:
            return shm
        if self.shares_fds and self.open_files:
            need = in_flight * (self.batch_tensors or 1) + workers * self.fds_per_worker
            if need > HEADROOM * self.open_files:
                return f"w{workers} would hold ~{need} open files; the limit is {self.open_files} (ulimit -n)"
        fit = memory_fit([t for t in history if t.status == "ok"])
        if self.memory_bytes and fit is not None:
            base, per_worker = fit
            predicted = base + max(per_worker, 0.0) * workers
            if predicted > HEADROOM * self.memory_bytes:
                return (f"w{workers} would need ~{predicted / 1e9:.1f} GB (measured {per_worker / 1e6:.0f} MB "
                        f"per worker); the memory limit is {self.memory_bytes / 1e9:.1f} GB")
        return None


RULE_OF_THUMB_NAMES = ("0.75 × usable CPUs", "usable CPUs − 1")
AUTOTUNE_RULE = "Paddle autotune"


def rules_of_thumb(usable_cpus: int, space: SearchSpace,
                   autotune: int | None = None) -> list[tuple[str, LoaderConfig]]:
    """What common advice picks: ``0.75 × CPUs`` and ``CPUs − 1`` workers, pinned (PyTorch, with a GPU) and
    persistent where the space allows, the other knobs at their defaults; and ``autotune``, the worker
    count Paddle's own autotune picked, with ``paddle.io.DataLoader``'s defaults (it changes nothing else)."""
    pin = True in space.pin_memory
    persistent = True in space.persistent_workers
    prefetch = 2 if 2 in space.prefetch_factors else min(space.prefetch_factors)
    counts = (max(1, int(0.75 * usable_cpus + 0.5)), max(1, usable_cpus - 1))
    rules = [(name, space.config(count, pin=pin, prefetch=prefetch, persistent=persistent))
             for name, count in zip(RULE_OF_THUMB_NAMES, counts, strict=True)]
    if autotune is not None:
        rules.append((AUTOTUNE_RULE, space.config(autotune, prefetch=2, persistent=False)))
    return rules


class Strategy(Protocol):
    """A search strategy: ``propose(history)`` gives the next config to measure (None: stop) and why."""
    name: str

    def propose(self, history: Sequence[TrialResult]) -> Proposal:
        """The next config to measure and why, or a Proposal without a config to stop."""

    def total(self) -> int | None:
        """How many trials the search will run, when known in advance."""


class _Searching:
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

    def _rule_of_thumb_step(self, history: Sequence[TrialResult]) -> Proposal | None:
        done = {t.config for t in history}
        for name, config in self.comparisons():
            if config not in done and self.budget.forbids(config, history) is None:
                return Proposal(config, f"rule of thumb ({name}), measured for comparison")
        return None


class GridStrategy(_Searching):
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


def _rate(trial: TrialResult) -> float:
    return trial.samples_per_s or 0.0


def _gain(new: TrialResult, old: TrialResult) -> str:
    """``w2 → w4: +98%`` (full labels when more than the worker count differs)."""
    same_knobs = dataclasses.replace(old.config, num_workers=new.config.num_workers) == new.config
    before = f"w{old.config.num_workers}" if same_knobs else old.config.label()
    after = f"w{new.config.num_workers}" if same_knobs else new.config.label()
    return f"{before} → {after}: {_rate(new) / _rate(old) - 1:+.0%}"


def _between(low: int, high: int) -> int:
    """The geometric midpoint of two worker counts, strictly between them when there is room."""
    middle = round(math.sqrt(low * high)) if low > 0 else high // 2
    return middle if low < middle < high else (low + high) // 2


class AdaptiveStrategy(_Searching):
    """Climb workers, refine around the peak, tune the other knobs at the best count, then the rules of thumb.

    Stateless: every call re-reads the history from the start, so the same
    trials always give the same next step and the same reasons.
    """

    name = "adaptive"
    max_refinements = 2
    min_step = 0.15
    """Refinement stops when the next count is within this share of the best one."""
    linear = 0.9
    """A doubling of workers that gives at least this share of a doubled rate scales near-linearly."""

    def __init__(self, space: SearchSpace, budget: Budget | None = None, rules: bool = True,
                 autotune: int | None = None, current: LoaderConfig | None = None) -> None:
        super().__init__(space, budget, rules, autotune, current)
        self.ladder = sorted({w for w in space.workers if w > 0})
        self.baseline = baseline(space.framework)

    def total(self) -> int | None:
        """Unknown in advance (None): the climb stops when more workers stop paying."""
        return None

    def climb_config(self, workers: int) -> LoaderConfig:
        """The space's default knobs at ``workers``; for Paddle, ``use_shared_memory=False`` (when the space has
        it) where /dev/shm cannot hold the batches in flight, so a small /dev/shm does not end the climb."""
        config = self.space.default_config(workers)
        if config.use_shared_memory and False in self.space.use_shared_memory and self.budget.shm_forbids(config):
            return dataclasses.replace(config, use_shared_memory=False)
        return config

    def propose(self, history: Sequence[TrialResult]) -> Proposal:
        """Climb num_workers while it pays, refine around the best, then tune the other knobs there."""
        done = {t.config: t for t in history}
        if self.baseline not in done:
            framework = "Paddle" if self.space.framework == "paddle" else "PyTorch"
            return Proposal(self.baseline, f"baseline: num_workers=0, {framework}'s default")
        mine = self._current_step(done)
        if mine is not None:
            return mine
        for step in (self._climb, self._refine, self._tune):
            proposal = step(done, history)
            if proposal is not None:
                return proposal
        return self._rule_of_thumb_step(history) or \
            Proposal(None, self._stop_reason(done, history))

    def _measured(self, done: dict[LoaderConfig, TrialResult]) -> list[TrialResult]:
        """Trials at the climbing knobs, by worker count."""
        return sorted((t for c, t in done.items() if c.num_workers > 0 and c == self.climb_config(c.num_workers)),
                      key=lambda t: t.config.num_workers)

    def _rungs(self, done: dict[LoaderConfig, TrialResult]) -> list[int]:
        """The ladder as climbed: after a step that scaled almost linearly, the next rung is skipped.

        A latency-bound loader doubles its rate with each doubling of workers;
        jumping ×4 there halves the climb, and refinement comes back for the
        skipped counts if the peak lies among them.
        """
        rungs: list[int] = []
        previous = done.get(self.baseline)
        index = 0
        while index < len(self.ladder):
            workers = self.ladder[index]
            rungs.append(workers)
            trial = done.get(self.climb_config(workers))
            step = 1
            if trial is not None and trial.status == "ok" and previous is not None and _rate(previous) > 0 \
                    and not self._saturated(trial):  # past a saturated CPU budget, one rung at a time
                ratio = workers / max(1, previous.config.num_workers)
                if ratio >= 2 and _rate(trial) / _rate(previous) >= self.linear * ratio:
                    step = 2
            if trial is not None and trial.status == "ok":
                previous = trial
            index += step if index + step < len(self.ladder) else 1
        return rungs

    def _walk(self, done: dict[LoaderConfig, TrialResult],
              history: Sequence[TrialResult]) -> tuple[Proposal | None, str]:
        """Walk the climbed rungs: the next one to measure, or None and why climbing stopped."""
        baseline = done.get(self.baseline)
        best = baseline if baseline is not None and baseline.status == "ok" else None
        last_step = ""
        for workers in self._rungs(done):
            config = self.climb_config(workers)
            trial = done.get(config)
            if trial is None:
                blocked = self.budget.forbids(config, history)
                if blocked is not None:
                    return None, f"stopped climbing: {blocked}"
                skipped = [r for r in self.ladder if best is not None and best.config.num_workers < r < workers]
                skip = f", near-linear: skip w{','.join(map(str, skipped))}" if skipped else ""
                piped = self.space.default_config(workers) != config
                pipe = f"; use_shared_memory=False: {self.budget.shm_forbids(self.space.default_config(workers))}" \
                    if piped else ""
                why = (f"climb: {last_step}{skip}" if last_step else "climb") + pipe
                return Proposal(config, why), "climbing"
            if trial.status != "ok":
                return None, f"stopped climbing: {config.label()} {trial.status}"
            if best is not None and not self._gains(trial, best):
                if workers > 1:
                    noise = noise_between(trial, best)
                    cpu = (f"; {best.config.label()} already used {(best.cpu_percent or 0) / 100:.1f} of "
                           f"{self.budget.usable_cpus} usable CPUs" if self._saturated(best) else "")
                    return None, f"stopped climbing: {_gain(trial, best)}, not beyond the ±{noise:.0%} noise{cpu}"
                continue  # one worker loads no faster than the main process: parallelism starts at two
            if best is not None:
                last_step = f"{_gain(trial, best)} > noise"
            best = trial
        return None, (f"stopped climbing: top of the worker range (w{self.ladder[-1]})" if self.ladder
                      else "no workers")

    def _climb(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """Next rung of the worker ladder, or None once climbing has stopped."""
        return self._walk(done, history)[0]

    def _gains(self, trial: TrialResult, best: TrialResult) -> bool:
        return _rate(trial) > _rate(best) * (1 + noise_between(trial, best))

    def _saturated(self, trial: TrialResult) -> bool:
        """The trial used most of the CPUs it had: the usable ones, less what other processes took."""
        cpu = trial.cpu_percent
        return cpu is not None and \
            cpu / 100.0 >= self.budget.saturated_cpu * available_cpus(trial, self.budget.usable_cpus)

    def _refine(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """Bisect (geometrically, as the ladder is) between the best count and a clearly worse or failed neighbour.

        The more promising side goes first: the better neighbour's, or a failed
        one's above a still-rising curve. When the budget stopped the climb, the
        most workers it allows is tried.
        """
        measured = self._measured(done)
        ok = [t for t in measured if t.status == "ok"]
        refined = sum(1 for t in measured if t.config.num_workers not in self.ladder and t.config != self.current)
        if not ok or refined >= self.max_refinements:
            return None
        best = max(ok, key=_rate)
        w = best.config.num_workers
        baseline = done.get(self.baseline)
        below = next((t for t in reversed(ok) if t.config.num_workers < w),
                     baseline if baseline is not None and baseline.status == "ok" else None)
        above = next((t for t in measured if t.config.num_workers > w), None)
        sides: list[tuple[float, int, str]] = []
        if above is not None and (above.status != "ok" or self._gains(best, above)):
            rising = below is not None and self._gains(best, below)
            promise = _rate(above) if above.status == "ok" else (_rate(best) if rising else 0.0)
            sides.append((promise, _between(w, above.config.num_workers),
                          f"refine between w{w} and w{above.config.num_workers}"))
        if below is not None and self._gains(best, below):
            sides.append((_rate(below), _between(below.config.num_workers, w),
                          f"refine between w{below.config.num_workers} and w{w}"))
        rung = next((r for r in self.ladder if r > w and self.climb_config(r) not in done), None)
        if above is None and rung is not None and self.budget.forbids(self.climb_config(rung), history):
            fitting = next((n for n in range(rung - 1, w, -1)
                            if self.budget.forbids(self.climb_config(n), history) is None), None)
            if fitting is not None:
                sides.append((float("inf"), fitting, f"the most workers the budget allows below w{rung}"))
        for _, workers, why in sorted(sides, key=lambda side: -side[0]):
            config = self.climb_config(workers)
            if workers in (w, 0) or config in done or self.budget.forbids(config, history) is not None:
                continue
            if abs(workers - w) < self.min_step * w:
                continue  # a bracket this narrow holds no gain worth a trial
            return Proposal(config, why)
        return None

    def _best_at_climb_knobs(self, done: dict[LoaderConfig, TrialResult]) -> TrialResult | None:
        ok = [t for t in self._measured(done) if t.status == "ok"]
        return max(ok, key=_rate) if ok else None

    def _tune(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """One knob at a time at the best worker count: pin_memory (PyTorch) or use_shared_memory and
        use_buffer_reader (Paddle), then prefetch_factor."""
        anchor = self._best_at_climb_knobs(done)
        if anchor is None:
            return None
        current = anchor
        # persistent_workers=False only adds a worker restart every epoch: it cannot load faster, so it is
        # not tuned (the climb uses it when it is the only value given).
        for knob, values in self.space.tuned_knobs():
            tried = []
            for value in values:
                config = dataclasses.replace(current.config, **{knob: value})  # type: ignore[arg-type]
                if config == current.config:
                    continue
                trial = done.get(config)
                if trial is None:
                    if self.budget.forbids(config, history) is not None:
                        continue
                    return Proposal(config, f"tune {knob}={value} at the best so far")
                tried.append(trial)
            winners = [t for t in tried if t.status == "ok" and self._gains(t, current)]
            if winners:
                current = max(winners, key=_rate)
        return None

    def _stop_reason(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> str:
        best = max((t for t in history if t.status == "ok"), key=_rate, default=None)
        climb = self._walk(done, history)[1]
        tail = f"; best {best.config.label()}, no untried neighbour left to beat it" if best else ""
        return climb + tail


STRATEGIES: dict[str, Callable[[SearchSpace, Budget, bool, int | None, LoaderConfig | None], Strategy]] = {
    "adaptive": AdaptiveStrategy, "grid": GridStrategy}
"""``--strategy`` choice → implementation (every choice must be mapped)."""

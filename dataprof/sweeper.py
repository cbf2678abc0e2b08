"""Run a sweep: strategy proposes, runner measures, a Report comes out.

Knows nothing of the CLI or of output formats. Progress and incremental saves
reach the caller through ``observer`` and ``on_update``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from dataprof.decide.cache import (
    cold_climb_end,
    cold_notes,
    next_cold,
    read_from_storage,
    warm_again,
    warm_misses,
    warmed_note,
    why_no_cold,
)
from dataprof.decide.ranks import aggregate_ranks
from dataprof.decide.search import STRATEGIES, Proposal, Strategy
from dataprof.decide.search.common import climb_config, pooled, search_budget
from dataprof.decide.settings import pinned, resolve_settings, resumable_trials
from dataprof.decide.sweep import build_note, decide, persistent_epochs_note, sweep_notes
from dataprof.decide.threads import thread_notes
from dataprof.distributed import Coordinator
from dataprof.errors import DataprofError, TargetError
from dataprof.measure.cache.footprint import dataset_paths, footprint, page_cache_room
from dataprof.measure.cache.page_cache import can_evict, read_back
from dataprof.measure.environment import cpu_budget, cuda_devices, probe_environment
from dataprof.measure.sweep.runner import TrialRunner
from dataprof.measure.timing import Rival
from dataprof.results.cache import DataFootprint, ReadBack
from dataprof.results.environment import CpuBudget, DatasetInfo, Environment, RankInfo
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.sweep import AutotuneRun, Report, SearchStep
from dataprof.results.threads import ThreadCheck
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import CacheMode, DatasetKind, Event, Framework, Observer, TrialStatus
from dataprof.version import __version__


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep; carries the partial report."""

    def __init__(self, report: Report) -> None:
        super().__init__("interrupted")
        self.report = report


class SweepTargetError(TargetError):
    """The target failed in a way every config would repeat; carries what was measured."""

    def __init__(self, message: str, detail: str | None, report: Report) -> None:
        super().__init__(message, detail)
        self.report = dataclasses.replace(report, error=message)


AUTOTUNE_TIMEOUT_S = 300.0
"""Paddle's autotune is killed after this long (it times tuning_steps batches per worker count it tries)."""


@dataclasses.dataclass
class _Sweep:
    """The state of one sweep while it runs: what was measured, in order, and why."""

    settings: SweepSettings
    runner: TrialRunner
    observer: Observer
    coordinator: Coordinator | None
    environment: Environment
    """The machine; probed again once the dataset has settled the device and framework."""
    clock: Callable[[], float] = time.monotonic
    """Seconds, for the sweep's wall time (a test's fake clock)."""
    started: float = dataclasses.field(init=False)
    trials: list[TrialResult] = dataclasses.field(default_factory=list)
    steps: list[SearchStep] = dataclasses.field(default_factory=list)
    stop: str | None = None
    dataset: DatasetInfo | None = None
    autotune: AutotuneRun | None = None
    checks: list[str] = dataclasses.field(default_factory=list)
    cold: list[TrialResult] = dataclasses.field(default_factory=list)
    footprint: DataFootprint | None = None
    thread_check: ThreadCheck | None = None
    warmed: list[tuple[str, ReadBack]] = dataclasses.field(default_factory=list)
    """Warm trials measured again once their data was cached, with what that reading took."""
    restored: ReadBack | None = None
    """What reading the evicted files back after the cold trials did."""

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def rank(self) -> RankInfo | None:
        """This process's rank under torchrun, else None."""
        return self.coordinator.info if self.coordinator is not None else None

    @property
    def leader(self) -> bool:
        """Whether this process reports (rank 0, or the only process)."""
        return self.coordinator is None or self.coordinator.leader

    def report(self, complete: bool) -> Report:
        """The Report of what was measured so far, decided."""
        runner, facts = self.runner, self.runner.facts
        env = dataclasses.replace(self.environment, gpu_name=facts.gpu_name,
                                  start_method=runner.host_info.start_method,
                                  sharing_strategy=runner.host_info.sharing_strategy)
        how, warmed = build_note(facts.builds), warmed_note(self.warmed)
        gpu = f"GPU utilisation not measured: {facts.gpu_reason}" if facts.gpu_reason else None
        missed = warm_misses(self.trials, self.cold)
        notes = (*sweep_notes(self.settings), *self.checks, *(note for note in (how, gpu, warmed) if note),
                 *cold_notes(self.runner.evictions, self.cold, self.restored), *((missed,) if missed else ()),
                 *thread_notes(self.settings, self.dataset, self.thread_check))
        built = None if self.dataset is None else \
            dataclasses.replace(self.dataset, build="per_trial" if facts.build_per_trial else "once")
        return decide(Report(
            target=self.settings.target, tool_version=__version__, environment=env, settings=self.settings,
            trials=tuple(self.trials), dataset=built, wall_s=self.clock() - self.started, complete=complete,
            notes=notes, search_steps=tuple(self.steps), search_stop=self.stop, autotune=self.autotune,
            cold_trials=tuple(self.cold), data_footprint=self.footprint, thread_check=self.thread_check))

    def load(self) -> None:
        """Load the dataset in a probe, settle the settings; every rank agrees whether it loaded."""
        try:
            self.dataset = self.runner.start()
            self.settings = self.runner.settings = resolve_settings(self.settings, self.runner.host_info,
                                                                    cuda_devices, rank=self.rank)
        except DataprofError as exc:
            if self.coordinator is not None:
                self.coordinator.agree(str(exc))
            if isinstance(exc, TargetError) and not isinstance(exc, SweepTargetError):
                raise SweepTargetError(exc.message, exc.detail, self.report(False)) from exc
            raise
        if self.coordinator is not None:
            self.coordinator.agree(None)
        self.environment = probe_environment(self.settings.device, budget=self._budget(),
                                             framework=self.settings.framework, rank=self.rank)

    def _budget(self) -> CpuBudget:
        """The CPUs the trials may use: this rank's share of the node's, pinned to ``--cpus`` when given."""
        local = self.rank.local_world_size if self.rank else 1
        return pinned(cpu_budget(ranks_per_node=local), self.settings.cpus)

    def prepare(self, resume: Report | None) -> Strategy | None:
        """Resumed trials, Paddle's autotune, the epoch check; the strategy (rank 0 only)."""
        settings, runner = self.settings, self.runner
        if resume is not None:
            self.trials.extend(resumable_trials(resume, settings))
            self.steps.extend(SearchStep(t.config, "measured before (--resume)") for t in self.trials)
        if settings.framework == Framework.PADDLE and settings.rules_of_thumb:
            self.observer(Event.AUTOTUNE_START, {"steps": settings.autotune_steps})
            self.autotune = runner.side_runs.autotune(settings.autotune_steps, AUTOTUNE_TIMEOUT_S)
            self.observer(Event.AUTOTUNE_DONE, {"autotune": self.autotune})
        if self.leader and self.dataset is not None and self.dataset.kind == DatasetKind.ITERABLE:
            self.settings = runner.settings = check_persistent_epochs(settings, runner, self.checks)
        if not self.leader:
            return None
        budget = search_budget(self.settings, self.environment, self.dataset, runner.host_info)
        strategy = STRATEGIES[self.settings.strategy](self.settings.space, budget, self.settings.rules_of_thumb,
                                                      self.autotune.num_workers if self.autotune else None,
                                                      self.settings.current)
        self.observer(Event.PLANNED, {"total": strategy.total()})
        return strategy

    def _record(self, result: TrialResult, repeat: bool) -> int:
        """Keep a trial; a re-measure pools with the trial of its config (one row, both windows). Its index."""
        earlier = next((i for i, t in enumerate(self.trials) if t.config == result.config), None) if repeat else None
        if earlier is None:
            self.trials.append(result)
            return len(self.trials) - 1
        self.trials[earlier] = pooled(self.trials[earlier], result)
        return earlier

    def search(self, strategy: Strategy | None, on_update: Callable[[Report], None]) -> None:
        """Measure what the strategy proposes until it stops (under torchrun, on every rank at once)."""
        proposal = None
        while True:
            proposal = strategy.propose(self.trials) if strategy is not None else None
            config = proposal.config if proposal is not None else None
            if self.coordinator is not None:
                config = self.coordinator.broadcast(config)  # rank 0's choice; None ends the sweep everywhere
            if config is None:
                break
            if proposal is not None:  # rank 0
                self.steps.append(SearchStep(config, proposal.why))
                self.observer(Event.TRIAL_START, {"config": config, "index": len(self.trials), "why": proposal.why})
            if self.coordinator is not None:
                result = on_every_rank(self.coordinator, self.runner, config)
            else:
                result = self._unsafe_threads(config) or self._measure_warm(config, rival_of(proposal))
            if result is None:
                continue  # not rank 0: its measurement went to rank 0
            index = self._record(result, proposal is not None and proposal.repeat)
            self.observer(Event.TRIAL_DONE, {"result": result, "index": index})
            if len(self.trials) == 1 and result.status in FIRST_TRIAL_FATAL:
                if self.coordinator is not None:
                    self.coordinator.broadcast(None)
                raise SweepTargetError(
                    f"the first trial ({config.label()}) {FIRST_TRIAL_FATAL[result.status]}, so every config "
                    f"would: {result.error}", None, self.report(False))
            on_update(self.report(False))
        self.stop = proposal.why if proposal is not None else None

    def _measure_warm(self, config: LoaderConfig, rival: Rival | None) -> TrialResult:
        """``config`` measured warm: a trial that read from storage is measured again once the dataset's files (those
        read so far and their directories' :func:`dataset_paths`) are read into the page cache, when they fit it
        (:func:`warm_again`)."""
        result = self.runner.measure(config, rival)
        cpus = self.environment.cpu_count
        if self.settings.cache == CacheMode.COLD or any(label == config.label() for label, _ in self.warmed) \
                or not read_from_storage(result, cpus=cpus):
            return result  # the dataset's directories are walked only for a trial that read from storage
        files = dataset_paths(self.runner.data_files)
        if not warm_again(result, sum(files.values()), page_cache_room(), cpus):
            return result
        self.warmed.append((config.label(), read_back(list(files))))
        return self.runner.measure(config, rival)

    def _unsafe_threads(self, config: LoaderConfig) -> TrialResult | None:
        """A thread config's trial failed without running when the thread check (run before the first thread
        trial) found threads return other samples than one process; None when it may run."""
        if not config.threads:
            return None
        if self.thread_check is None:
            self.thread_check = self.runner.side_runs.thread_check(config, self.settings.trial_timeout_s)
        reason = self.thread_check.failure()
        return None if reason is None else TrialResult(config, TrialStatus.FAILED, error=reason)

    def cold_search(self, on_update: Callable[[Report], None]) -> None:
        """Measure cold what :func:`next_cold` asks for, once the warm search has found the data files."""
        if self.settings.cache == CacheMode.WARM or not self.leader:
            return
        if self.coordinator is not None:
            self.checks.append("no cold trial: cold trials are not run across ranks yet (--nproc-per-node, "
                               "torchrun); sweep one rank with --cache cold for its cold figure")
            return
        if self.runner.data_files.sizes:
            self.footprint = footprint(self.runner.data_files, page_cache_room())
            if (missing := can_evict()) is not None:
                self.checks.append(f"no cold trial: {missing}")
                return
        report = self.report(False)
        if (why := why_no_cold(report)) is not None:
            self.checks.append(why)
        self._cold_trials(report, on_update)
        if self.runner.evictions:  # the files cached before the cold trials, cached again, as the training found them
            self.restored = read_back(self.runner.evictions[0].cached_before)

    def _cold_trials(self, report: Report, on_update: Callable[[Report], None]) -> None:
        while (step := next_cold(report)) is not None:
            config, why = step
            self.steps.append(SearchStep(config, f"cold: {why}", cache="cold"))
            self.observer(Event.TRIAL_START, {"config": config, "index": len(self.trials) + len(self.cold),
                                              "why": f"cold: {why}"})
            result = self.runner.measure(config, cold=True)
            self.cold.append(result)
            self.observer(Event.TRIAL_DONE, {"result": result, "index": len(self.trials) + len(self.cold) - 1})
            report = self.report(False)
            on_update(report)
        if (end := cold_climb_end(report)) is not None:
            self.checks.append(end)


def run_sweep(
    settings: SweepSettings,
    observer: Observer | None = None,
    on_update: Callable[[Report], None] | None = None,
    resume: Report | None = None,
    coordinator: Coordinator | None = None,
    objects: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Measure every config the strategy proposes. Raises TargetError, UsageError, SweepInterrupted, RankLost.

    The framework, device and knobs are settled once the dataset is loaded
    (:func:`resolve_settings`). ``resume``: a saved run (``--resume``) whose
    trials count as measured and are not run again. ``coordinator``: under
    torchrun, rank 0 searches and every rank measures each config at the same
    time; rank 0's report aggregates them (other ranks return one without trials).
    ``objects``: Python objects (a Dataset, a collate function) named by the
    settings' target and collate_fn, handed over by the Python API. ``clock``: seconds, for the wall time and the
    trials' timeouts.
    """
    sweep = _Sweep(settings, TrialRunner(settings, observer, objects=objects or {}, clock=clock),
                   observer or (lambda event, data: None), coordinator, probe_environment(settings.device), clock)
    updated = on_update or (lambda report: None)
    try:
        sweep.observer(Event.LOADING, {"target": settings.target})
        sweep.load()
        sweep.search(sweep.prepare(resume), updated)
        sweep.cold_search(updated)
    except KeyboardInterrupt:
        sweep.runner.kill_current()
        raise SweepInterrupted(sweep.report(False)) from None
    finally:
        sweep.runner.close()
    final = sweep.report(True)
    if sweep.leader and sweep.trials and not any(t.status == TrialStatus.OK for t in sweep.trials):
        reasons = "; ".join(sorted({f"{t.status}: {t.error}" for t in sweep.trials if t.status != TrialStatus.OK}))
        raise SweepTargetError(f"no configuration completed ({reasons})", None, final)
    updated(final)
    return final


FIRST_TRIAL_FATAL = {TrialStatus.FAILED: "failed", TrialStatus.TIMEOUT: "hung", TrialStatus.CRASHED: "crashed"}
"""A first trial ending so (after a retry that built its own dataset) is the target's fault, not the config's."""

EPOCH_CHECK_STALL_S = 5.0
"""The epoch check's tiny batches come in milliseconds: this long without one, once they flow, is a hang."""


def check_persistent_epochs(settings: SweepSettings, runner: Any, notes: list[str]) -> SweepSettings:
    """Drop persistent_workers=True where the installed DataLoader fails at the end of a stream's epoch.

    Each persistent worker meets the end of its share of an IterableDataset and must start the next
    epoch; a trial's window seldom reaches that point, so a tiny stream is run through eight epochs with
    two persistent workers first (e.g. paddle 3.3's DataLoader fails there). ``notes`` gets the reason.
    """
    space = settings.space
    if True not in space.persistent_workers or max(space.workers) < 2:
        return settings
    config = dataclasses.replace(climb_config(space, 2), persistent_workers=True)
    problem = runner.side_runs.epoch_check(config, settings.trial_timeout_s, EPOCH_CHECK_STALL_S)
    if problem is None:
        return settings
    notes.append(persistent_epochs_note(settings.framework, runner.host_info.framework_version or "",
                                        problem))
    return dataclasses.replace(settings, space=dataclasses.replace(space, persistent_workers=(False,)))


def rival_of(proposal: Proposal | None) -> Rival | None:
    """The figures of the trial a proposal's decision weighs it against, for its window to end once settled."""
    rival = proposal.rival if proposal is not None else None
    if rival is None or rival.status != TrialStatus.OK or not rival.samples_per_s:
        return None
    return Rival(rival.samples_per_s, rival.samples_per_s_spread or 0.0, proposal is not None and proposal.either_way)


def on_every_rank(coordinator: Coordinator, runner: Any, config: LoaderConfig) -> TrialResult | None:
    """Every rank measures ``config`` at once (a barrier opens the trial); rank 0 gets the aggregate."""
    coordinator.barrier()
    result = runner.measure(config)
    gathered = coordinator.gather(result)
    return aggregate_ranks(gathered) if gathered is not None else None

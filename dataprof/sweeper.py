"""Run a sweep: strategy proposes, runner measures, a Report comes out.

Knows nothing of the CLI or of output formats. Progress and incremental saves
reach the caller through ``observer`` and ``on_update``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from dataprof import __version__
from dataprof.config import LoaderConfig, SearchSpace, SweepSettings
from dataprof.diagnose import diagnose
from dataprof.diagnose.facts import batch_size, cpu_ceiling
from dataprof.distributed import Coordinator, aggregate_ranks
from dataprof.errors import DataprofError, TargetError, UsageError
from dataprof.measure.environment import probe_environment
from dataprof.measure.runner import Observer, TrialRunner
from dataprof.model import AutotuneRun, DatasetInfo, Environment, Report, RuleOfThumb, SearchStep, TrialResult
from dataprof.options import resolve_settings
from dataprof.recommend import noise_between, recommend
from dataprof.search import STRATEGIES, Budget, rules_of_thumb


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


def build_report(settings: SweepSettings, environment: Environment, dataset: DatasetInfo | None,
                 trials: list[TrialResult], wall_s: float, complete: bool,
                 notes: tuple[str, ...] = (), steps: Sequence[SearchStep] = (), stop: str | None = None,
                 autotune: AutotuneRun | None = None) -> Report:
    """Assemble the Report and its decisions (pure)."""
    return decide(Report(
        target=settings.target,
        tool_version=__version__,
        environment=environment,
        settings=settings.to_dict(),
        trials=tuple(trials),
        dataset=dataset,
        wall_s=wall_s,
        complete=complete,
        notes=notes,
        search_steps=tuple(steps),
        search_stop=stop,
        autotune=autotune,
    ))


AUTOTUNE_TIMEOUT_S = 300.0
"""Paddle's autotune is killed after this long (it times tuning_steps batches per worker count it tries)."""


def sweep_notes(settings: SweepSettings) -> tuple[str, ...]:
    return (f"workers {','.join(map(str, settings.space.workers))}: {settings.space.workers_reason}",)


def run_sweep(
    settings: SweepSettings,
    args: list[str],
    observer: Observer | None = None,
    on_update: Callable[[Report], None] | None = None,
    runner_factory: Callable[..., Any] = TrialRunner,
    resume: Report | None = None,
    coordinator: Coordinator | None = None,
) -> Report:
    """Measure every config the strategy proposes. Raises TargetError, UsageError, SweepInterrupted.

    The framework, device and knobs are settled once the dataset is loaded
    (:func:`resolve_settings`). ``resume``: a saved run (``--resume``) whose
    trials count as measured and are not run again. ``coordinator``: under
    torchrun, rank 0 searches and every rank measures each config at the same
    time; rank 0's report aggregates them (other ranks return one without trials).
    """
    started = time.monotonic()
    rank = coordinator.info if coordinator is not None else None
    leader = rank is None or rank.rank == 0
    runner = runner_factory(settings, args, observer)
    trials: list[TrialResult] = []
    steps: list[SearchStep] = []
    stop: str | None = None
    environment = probe_environment(settings.device)  # the device and framework are settled once loaded
    dataset: DatasetInfo | None = None
    autotune: AutotuneRun | None = None
    checks: list[str] = []

    def report(complete: bool) -> Report:
        env = dataclasses.replace(environment, gpu_name=runner.gpu_name,
                                  start_method=runner.host_info.get("start_method"),
                                  sharing_strategy=runner.host_info.get("sharing_strategy"))
        notes = sweep_notes(settings) + tuple(checks)
        if runner.build_note:
            notes += (runner.build_note,)
        if runner.gpu_reason:
            notes += (f"GPU utilisation not measured: {runner.gpu_reason}",)
        built = None if dataset is None else \
            dataclasses.replace(dataset, build="per_trial" if runner.build_in_trials else "once")
        return build_report(settings, env, built, trials, time.monotonic() - started, complete, notes,
                            steps, stop, autotune)

    try:
        if observer is not None:
            observer("loading", {"target": settings.target})
        try:
            dataset = runner.start()
            settings = runner.settings = resolve_settings(settings, runner.host_info, rank=rank)
        except DataprofError as exc:
            if coordinator is not None:
                exc.said_by_rank_0 = coordinator.agree(str(exc)) and coordinator.info.rank > 0
            if isinstance(exc, TargetError) and not isinstance(exc, SweepTargetError):
                failed = SweepTargetError(exc.message, exc.detail, report(False))
                failed.said_by_rank_0 = exc.said_by_rank_0
                raise failed from exc
            raise
        if coordinator is not None:
            coordinator.agree(None)
        environment = probe_environment(settings.device, framework=settings.framework, rank=rank)
        if resume is not None:
            trials.extend(resumable_trials(resume, settings))
            steps.extend(SearchStep(t.config, "measured before (--resume)") for t in trials)
        if settings.framework == "paddle" and settings.rules_of_thumb:
            if observer is not None:
                observer("autotune_start", {"steps": settings.autotune_steps})
            autotune = runner.autotune(settings.autotune_steps, AUTOTUNE_TIMEOUT_S)
            if observer is not None:
                observer("autotune_done", {"autotune": autotune})
        if leader and dataset is not None and dataset.kind == "iterable":
            settings = runner.settings = check_persistent_epochs(settings, runner, checks)
        budget = search_budget(settings, environment, dataset, runner.host_info)
        strategy = STRATEGIES[settings.strategy](settings.space, budget, settings.rules_of_thumb,
                                                 autotune.num_workers if autotune is not None else None) \
            if leader else None
        if observer is not None and strategy is not None:
            observer("planned", {"total": strategy.total()})
        while True:
            proposal = strategy.propose(trials) if strategy is not None else None
            config = proposal.config if proposal is not None else None
            if coordinator is not None:
                config = coordinator.broadcast(config)  # rank 0's choice; None ends the sweep everywhere
            if config is None:
                break
            if proposal is not None:  # rank 0 (the only rank with an observer)
                steps.append(SearchStep(config, proposal.why))
                if observer is not None:
                    observer("trial_start", {"config": config, "index": len(trials), "why": proposal.why})
            result = runner.run(config) if coordinator is None else on_every_rank(coordinator, runner, config)
            if result is None:
                continue  # not rank 0: its measurement went to rank 0
            trials.append(result)
            if observer is not None:
                observer("trial_done", {"result": result, "index": len(trials) - 1})
            if len(trials) == 1 and result.status in FIRST_TRIAL_FATAL:
                if coordinator is not None:
                    coordinator.broadcast(None)
                raise SweepTargetError(
                    f"the first trial ({config.label()}) {FIRST_TRIAL_FATAL[result.status]}, so every config "
                    f"would: {result.error}", None, report(False))
            if on_update is not None:
                on_update(report(False))
        stop = proposal.why if proposal is not None else None
    except KeyboardInterrupt:
        runner.kill_current()
        raise SweepInterrupted(report(False)) from None
    finally:
        runner.close()
    final = report(True)
    if leader and trials and not any(t.status == "ok" for t in trials):
        reasons = "; ".join(sorted({f"{t.status}: {t.error}" for t in trials if t.status != "ok"}))
        raise SweepTargetError(f"no configuration completed ({reasons})", None, final)
    if on_update is not None:
        on_update(final)
    return final


FIRST_TRIAL_FATAL = {"failed": "failed", "timeout": "hung", "crashed": "crashed"}
"""A first trial ending so (after a retry that built its own dataset) is the target's fault, not the config's."""

EPOCH_CHECK_STALL_S = 5.0
"""The epoch check's tiny batches come in milliseconds: this long without one, once they flow, is a hang."""


def check_persistent_epochs(settings: SweepSettings, runner: Any, notes: list[str]) -> SweepSettings:
    """Drop persistent_workers=True where the installed DataLoader fails at the end of a stream's epoch.

    Each persistent worker meets the end of its share of an IterableDataset and must start the next
    epoch; a trial's window seldom reaches that point, so a tiny stream is run through four epochs with
    two persistent workers first (e.g. paddle 3.3's DataLoader fails there). ``notes`` gets the reason.
    """
    space = settings.space
    if True not in space.persistent_workers or max(space.workers) < 2:
        return settings
    config = dataclasses.replace(space.default_config(2), persistent_workers=True)
    problem = runner.epoch_check(config, settings.trial_timeout_s, EPOCH_CHECK_STALL_S)
    if problem is None:
        return settings
    version = runner.host_info.get("framework_version") or ""
    notes.append(f"persistent_workers=True not tried: {settings.framework} {version}'s DataLoader fails at the end "
                 f"of an IterableDataset's epoch with 2 persistent workers (checked on a tiny stream: {problem}); "
                 "each epoch starts its workers again")
    return dataclasses.replace(settings, space=dataclasses.replace(space, persistent_workers=(False,)))


def on_every_rank(coordinator: Coordinator, runner: Any, config: LoaderConfig) -> TrialResult | None:
    """Every rank measures ``config`` at once (a barrier opens the trial); rank 0 gets the aggregate."""
    coordinator.barrier()
    result = runner.run(config)
    gathered = coordinator.gather((coordinator.info, result))
    return aggregate_ranks(gathered) if gathered is not None else None


def search_budget(settings: SweepSettings, environment: Environment, dataset: DatasetInfo | None,
                  host_info: dict[str, Any]) -> Budget:
    """The limits a proposal must fit: memory limit, /dev/shm, open files (with fd sharing)."""
    return Budget(
        usable_cpus=environment.usable_cpus,
        memory_bytes=settings.memory_limit_bytes,
        shm_free_bytes=None if environment.shm_free_bytes is None else  # the node's ranks share /dev/shm
        environment.shm_free_bytes // environment.local_world_size,
        batch_bytes=dataset.batch_bytes if dataset else None,
        batch_tensors=dataset.batch_tensors if dataset else None,
        open_files=environment.open_files_limit,
        shares_fds=host_info.get("sharing_strategy", "file_descriptor") == "file_descriptor",
    )


def space_of(settings: dict[str, Any]) -> SearchSpace:
    """The search space a saved run used (for the rules of thumb when re-deciding)."""
    return SearchSpace(
        workers=tuple(settings.get("workers") or (0,)),
        prefetch_factors=tuple(settings.get("prefetch_factors") or (2,)),
        pin_memory=tuple(settings.get("pin_memory") or (False,)),
        persistent_workers=tuple(settings.get("persistent_workers") or (True,)),
        use_shared_memory=tuple(settings.get("use_shared_memory") or (True,)),
        use_buffer_reader=tuple(settings.get("use_buffer_reader") or (True,)),
        framework=settings.get("framework", "torch"),
        skipped=tuple(settings.get("skipped_knobs") or ()),
    )


def compare_rules_of_thumb(report: Report) -> tuple[RuleOfThumb, ...]:
    """What each rule of thumb picks, its measured throughput and how the recommendation compares."""
    if not report.settings.get("rules_of_thumb", True):
        return ()
    rec = report.recommendation
    rec_trial = next((t for t in report.trials if rec is not None and t.config == rec.config), None)
    rows = []
    autotune = report.autotune.num_workers if report.autotune is not None else None
    for rule, config in rules_of_thumb(report.environment.usable_cpus, space_of(report.settings), autotune):
        trial = next((t for t in report.trials if t.config == config), None)
        rate = trial.samples_per_s if trial is not None and trial.status == "ok" else None
        speedup = rec.samples_per_s / rate if rec is not None and rate else None
        within = bool(rec_trial is not None and trial is not None and rate
                      and (rec.samples_per_s - rate) / rec.samples_per_s <= noise_between(rec_trial, trial)) \
            if rec is not None else False
        rows.append(RuleOfThumb(rule=rule, config=config, status=None if trial is None else trial.status,
                                samples_per_s=rate, recommended_speedup=speedup, within_noise=within))
    return tuple(rows)


def decide(report: Report) -> Report:
    """Recommend and diagnose from the measurements alone; ``dataprof diagnose`` re-runs this on saved runs."""
    recommendation = recommend(report.trials)
    trial = next((t for t in report.trials if recommendation and t.config == recommendation.config), None)
    if recommendation is not None and trial is not None:
        ceiling = cpu_ceiling(trial, batch_size(report), report.environment.usable_cpus)
        recommendation = dataclasses.replace(recommendation, cpu_ceiling_samples_per_s=ceiling)
    recommended = dataclasses.replace(report, recommendation=recommendation)
    primary, findings = diagnose(recommended)
    return dataclasses.replace(recommended, primary=primary, findings=findings,
                               rules_of_thumb=compare_rules_of_thumb(recommended))


RESUME_KEYS = ("framework", "batch_size", "step_ms", "device", "trial_seconds", "shuffle", "drop_last", "collate_fn",
               "target_kwargs")
"""Settings that change what a trial measures: a resumed sweep must match them."""


def resumable_trials(previous: Report, settings: SweepSettings) -> tuple[TrialResult, ...]:
    """The saved trials, if they were measured with the same target and settings."""
    if previous.target != settings.target:
        raise UsageError(f"--resume: the saved run profiled {previous.target}, not {settings.target}")
    current = settings.to_dict()
    saved = {"framework": "torch", **previous.settings}  # runs saved before Paddle support were PyTorch's
    for key in RESUME_KEYS:
        if saved.get(key) != current[key]:
            raise UsageError(f"--resume: the saved run used {key}={saved.get(key)!r}, "
                             f"this one {current[key]!r}; start a new sweep or match it")
    return previous.trials

"""Every decision a Report carries, made from its measurements alone.

``decide(report)`` fits the model of the pipeline, recommends a config (the model settling what the noise
cannot), computes its CPU ceiling, diagnoses
the bottleneck and compares the rules of thumb; the sweep calls it after every
trial and ``dataprof diagnose`` re-runs it on saved runs, so improved rules
apply to old measurements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dataprof.decide.cache import outlook, steady_case
from dataprof.decide.diagnose import diagnose
from dataprof.decide.diagnose.facts import batch_size, cpu_ceiling
from dataprof.decide.model import fit, predict
from dataprof.decide.plan import feeding, machine_of
from dataprof.decide.recommend import recommend
from dataprof.decide.search import rules_of_thumb
from dataprof.decide.threads import worker_kinds
from dataprof.results.cache import StorageOutlook
from dataprof.results.environment import DatasetBuilds
from dataprof.results.pipeline import PipelineModel
from dataprof.results.settings import SweepSettings
from dataprof.results.stats import noise_between
from dataprof.results.sweep import Recommendation, Report, RuleOfThumb, YourSettings
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import CacheMode, TrialStatus


def compare_rules_of_thumb(report: Report) -> tuple[RuleOfThumb, ...]:
    """What each rule of thumb picks, its measured throughput and how the recommendation compares."""
    if not report.settings.rules_of_thumb:
        return ()
    rec = report.recommendation
    pool = report.recommended_pool
    rec_trial = next((t for t in pool if rec is not None and t.config == rec.config), None)
    rows = []
    autotune = report.autotune.num_workers if report.autotune is not None else None
    space = report.settings.space
    for rule, config in rules_of_thumb(report.environment.usable_cpus, space, autotune):
        trial = next((t for t in pool if t.config == config), None)
        rate = trial.samples_per_s if trial is not None and trial.status == TrialStatus.OK else None
        speedup = rec.samples_per_s / rate if rec is not None and rate else None
        within = bool(rec_trial is not None and trial is not None and rate
                      and (rec.samples_per_s - rate) / rec.samples_per_s <= noise_between(rec_trial, trial)) \
            if rec is not None else False
        rows.append(RuleOfThumb(rule=rule, config=config, status=None if trial is None else trial.status,
                                samples_per_s=rate, recommended_speedup=speedup, within_noise=within))
    return tuple(rows)


def compare_current(report: Report) -> YourSettings | None:
    """The user's own settings (``settings.current``) against the recommendation: measured throughput, the
    speedup, whether it is within noise, and the knobs that change."""
    config = report.settings.current
    if config is None:
        return None
    rec = report.recommendation
    pool = report.recommended_pool
    trial = next((t for t in pool if t.config == config), None)
    rate = trial.samples_per_s if trial is not None and trial.status == TrialStatus.OK else None
    rec_trial = next((t for t in pool if rec is not None and t.config == rec.config), None)
    within = bool(rec is not None and rec_trial is not None and trial is not None and rate
                  and (rec.samples_per_s - rate) / rec.samples_per_s <= noise_between(rec_trial, trial))
    changes = rec.config.changed_from(config) if rec is not None else ()
    return YourSettings(source=report.settings.current_source or "--current", config=config,
                        status=None if trial is None else trial.status, samples_per_s=rate,
                        recommended_speedup=rec.samples_per_s / rate if rec is not None and rate else None,
                        within_noise=within, changes=changes)


def _by(model: PipelineModel, report: Report) -> Callable[[TrialResult], tuple[float, str]]:
    """A trial's rate by ``model``, on the sweep's CPUs at its step, and what holds it back."""
    step_s = float(report.settings.step_ms) / 1000

    def rate(trial: TrialResult) -> tuple[float, str]:
        found = predict(model, trial.config.num_workers, model.cpus, step_s)
        return found.samples_per_s, found.limit

    return rate


def _on_the_steady_figure(report: Report, warm: Recommendation | None) -> tuple[Recommendation | None,
                                                                              StorageOutlook | None]:
    """The recommendation made on the figure that matches the training (cold when every epoch reads from
    storage and configs were measured cold), and the storage outlook."""
    case = steady_case(report)
    cold = recommend(report.cold_trials)
    warm_trial = next((t for t in report.trials if warm is not None and t.config == warm.config), None)
    cold_trial = next((t for t in report.cold_trials if cold is not None and t.config == cold.config), None)
    chosen = warm
    if case is not None and case[0] == CacheMode.COLD and cold is not None:
        chosen = dataclasses.replace(cold, cache="cold",
                                     reason=f"measured cold, as the training reads ({case[1]}): {cold.reason}")
    return chosen, outlook(report, warm_trial, cold_trial)


def decide(report: Report) -> Report:
    """``report`` with its recommendation (and CPU ceiling), diagnosis, the user's settings compared, the
    rules-of-thumb rows, the model of its pipeline and the storage outlook (pure)."""
    model = fit(report)
    warm = recommend(report.trials, None if model is None else _by(model, report))
    recommendation, storage = _on_the_steady_figure(report, warm)
    cold = recommendation is not None and recommendation.cache == CacheMode.COLD
    pool = report.cold_trials if cold else report.trials
    trial = next((t for t in pool if recommendation and t.config == recommendation.config), None)
    if recommendation is not None and trial is not None:
        ceiling = cpu_ceiling(trial, batch_size(report), report.environment.usable_cpus)
        recommendation = dataclasses.replace(recommendation, cpu_ceiling_samples_per_s=ceiling)
    recommended = dataclasses.replace(report, recommendation=recommendation, model=model, storage=storage,
                                      feeding=None if model is None else feeding(model, machine_of(report)))
    primary, findings = diagnose(recommended)
    return dataclasses.replace(recommended, primary=primary, findings=findings,
                               rules_of_thumb=compare_rules_of_thumb(recommended),
                               current=compare_current(recommended), worker_kinds=worker_kinds(recommended))


def sweep_notes(settings: SweepSettings) -> tuple[str, ...]:
    """The notes every sweep's report carries (why these worker counts)."""
    return (f"workers {','.join(map(str, settings.space.workers))}: {settings.space.workers_reason}",)


def build_note(builds: DatasetBuilds) -> str | None:
    """How the trials got their dataset, and why, in words (the last thing that decided it)."""
    if builds.fallback is not None:
        label, status, error = builds.fallback
        return (f"every trial builds the dataset in a fresh process: {label} forked from the process that built it "
                f"ended {status} ({error}), and completed when the trial built its own")
    if builds.shared_after_s is not None:
        return (f"building the dataset took {builds.shared_after_s:.1f} s in a trial, so from then on it is built "
                "once and each trial is forked from the process that built it (which never iterates it)")
    if builds.given:
        return "every trial is forked from the process holding the dataset object given"
    if builds.build_s is not None:
        return (f"every trial builds the dataset ({builds.build_s:.2f} s) in a fresh process before its DataLoader, "
                "as a training script does")
    return None


def persistent_epochs_note(framework: str, version: str, problem: str) -> str:
    """Why ``persistent_workers=True`` is not tried: the installed DataLoader failed the epoch check."""
    return (f"persistent_workers=True not tried: {framework} {version}'s DataLoader fails at the end of an "
            f"IterableDataset's epoch with 2 persistent workers (checked on a tiny stream: {problem}); each epoch "
            "starts its workers again")



"""``dataprof tune``'s runs as trials (pure): which loader of a run is tuned, a run's figures as a trial, the
loader-only sweep's pick as knobs to set."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from dataprof.decide.run import restart_share
from dataprof.results.knobs import KnobValues, knob_words
from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.sweep import Report
from dataprof.results.trial import Percentiles
from dataprof.results.tune import LoaderSweep, TunedLoader, TuneRank, TuneTrial
from dataprof.results.vocabulary import StopCause, TrialStatus, WorkerKind

TRIAL_TAIL = 5
"""Lines of a failed run's stderr its trial keeps."""
PEER_GONE = ("closed by peer", "reset by peer", "remote worker", "broken pipe")
"""Words of a rank's error that says another rank went first (gloo's, NCCL's): not the cause to name."""
MIN_REPLAYED = 5
"""Replayed batches a headspace run needs past its first (the workers' stop) to count as the training's
ceiling."""

def sweep_target(loader: LoaderRun) -> tuple[str, dict[str, Any], str] | str:
    """What ``dataprof sweep`` can sweep of the tuned loader alone: the function (or DataModule) that built it,
    its arguments and split; else why not."""
    if loader.factory is None:
        return "its loader is not built by a function dataprof can call on its own (a module-level factory)"
    if loader.factory_blocked:
        return loader.factory_blocked
    args = {}
    for item in loader.factory_args or ():
        name, _, text = item.partition("=")
        try:
            args[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return f"its argument {name} is not a literal"
    return loader.factory, args, loader.factory_split or "train"


def loader_sweep_of(swept: LoaderSweep, report: Report, loader: TunedLoader) -> LoaderSweep:
    """``swept`` with the sweep's pick, as the knobs to set on the training's loader (those that differ from
    the script's), or why it cannot be set there."""
    best = report.best
    if best is None:
        return dataclasses.replace(swept, error="the sweep completed no config")
    config = best.config
    label, rate = config.label(), best.samples_per_s
    knobs = KnobValues(config.dataloader_kwargs()).apart_from(loader.settings)
    if config.threads:
        if loader.threads is None:
            return dataclasses.replace(swept, label=label, samples_per_s=rate,
                                       error="its pick loads in threads, which cannot load your training's loader")
        knobs = knobs | {"worker_kind": WorkerKind.THREAD.value}
    return dataclasses.replace(swept, config=knobs, label=label, samples_per_s=rate)


def tuned_loader(run: RunReport, site: str | None, split: str | None = None) -> LoaderRun | None:
    """The loader a run tunes, among those built at ``site`` (``--loader``; every loader without it) and of
    ``split`` when given: the training's (the split its framework names ``train``, then one of no named split
    over a validation's, then one mostly asked for with autograd on: an evaluation runs under ``no_grad``), then
    the busiest; None when the script iterated none there."""
    found = [loader for loader in run.loaders
             if site is None or loader.site == site or loader.site.endswith("/" + site)]
    if split is not None:
        found = [loader for loader in found if loader.split == split]
    return max(found, key=_training_first) if found else None


def _training_first(loader: LoaderRun) -> tuple[bool, bool, bool, int]:
    return (loader.split == "train", loader.split is None, (loader.training_fraction or 0.0) >= 0.5, loader.batches)


def others_note(run: RunReport, tuned: LoaderRun) -> str | None:
    """The loaders of the run other than the ``tuned`` one, named: they are left as the script builds them, and
    their epochs between the tuned loader's batches are not the training's time; None when there are none."""
    others = [loader for loader in run.loaders if loader is not tuned]
    if not others:
        return None
    named = "; ".join(f"{loader.site} ({loader.loader_class}, " + (f"{loader.split}, " if loader.split else "")
                      + f"{loader.batches:,} batches)" for loader in others)
    return (f"other loaders, left as your script builds them: {named}. Their epochs run between the tuned "
            "loader's batches (a validation pass) are not counted in the training's iterations/s; "
            "--loader FILE:LINE tunes another")


def loader_of(loader: LoaderRun, device: str = "cpu") -> TunedLoader:
    """The tuned loader as the report names it, with its knobs as the script set them (its workers' kind where
    they are threads, as a ``torchdata.nodes`` pipeline's are), and the ``device`` the training ran on."""
    return TunedLoader(loader.site, loader.loader_class, loader.batch_size,
                       KnobValues({k: v for k, v in loader.knobs().items() if v is not None}), device,
                       split=loader.split,
                       built_by=loader.built_by, batch_bytes=loader.batch_bytes, iterable=loader.iterable)


def trial_of(run: RunReport, config: KnobValues, role: str, site: str | None,
             split: str | None = None) -> TuneTrial:
    """One run of the training as a tune trial: its loader's steady figures; failed when the script ended with
    an error of its own or iterated no loader."""
    resources: dict[str, Any] = {"cpu_percent": run.resources.cpu_percent,
                                 "peak_memory_bytes": run.resources.peak_memory_bytes,
                                 "gpu_util_percent": run.resources.gpu_util_percent, "wall_s": run.wall_s}
    unseen = no_training(run, site, split)
    if run.stopped is not None:
        return TuneTrial(config, TrialStatus.FAILED, role, error=f"the script {run.stopped}"
                         + (f"; {unseen}" if unseen else ""), stderr_tail=run.stderr_tail[-TRIAL_TAIL:],
                         stderr_causes=run.stderr_causes, no_training=unseen is not None, **resources)
    if run.ended_by is None and run.exit_code:
        tail = run.stderr_tail[-TRIAL_TAIL:]
        return TuneTrial(config, TrialStatus.FAILED, role, error=f"the script exited with code {run.exit_code}"
                         + (f": {tail[-1]}" if tail else ""), stderr_tail=tail, stderr_causes=run.stderr_causes,
                         **resources)
    loader = tuned_loader(run, site, split)
    if loader is not None and loader.knobs_lost:
        had = knob_words(loader.knobs_lost)
        return TuneTrial(config, TrialStatus.FAILED, role, error=f"the override did not land: the script changed "
                         f"the loader after building it (at its first epoch it had {had})", **resources)
    problem = _replay_problem(run, loader) if role == "headspace" and loader is not None else None
    if problem is not None:
        return TuneTrial(config, TrialStatus.FAILED, role, error=problem, **resources)
    if unseen is not None or loader is None or not loader.iterations_per_s:
        why = unseen or ("the script iterated no DataLoader" if loader is None else "no steady batches to time: "
                         "give it longer (--trial-seconds, --trial-steps)")
        return TuneTrial(config, TrialStatus.FAILED, role, error=why, no_training=unseen is not None, **resources)
    step = loader.step_ms
    return TuneTrial(config, TrialStatus.OK, role,
                     iterations_per_s=loader.iterations_per_s,
                     samples_per_s=(loader.iterations_per_s or 0.0) * loader.batch_size if loader.batch_size
                     else loader.samples_per_s, data_wait_fraction=loader.data_wait_fraction,
                     step_ms=None if step is None else Percentiles(step.p50, step.p95),
                     startup_s=loader.first_batch_s[0] if loader.first_batch_s else None,
                     epoch_samples=loader.epoch_samples[0] if loader.epoch_samples else None,
                     warmup_wait_fraction=restart_share(loader), **resources)


def no_training(run: RunReport, site: str | None, split: str | None = None) -> str | None:
    """"No training seen" and what was, when the run delivered no training batch: none of the loader at ``site``
    (of ``split``), or, with no site, none of a training split's loader or asked for with autograd on (an
    evaluation before the training, longer than the run); None when it did, or iterated no loader at all."""
    if not run.loaders:
        return None
    found = tuned_loader(run, site, split)
    if found is not None and found.batches and (site is not None or found.split == "train"
                                                 or found.training_fraction is None or found.training_fraction > 0):
        return None
    seen = "; ".join(f"{loader.site} ({loader.loader_class}, " + (f"{loader.split}, " if loader.split else "")
                     + f"{loader.batches:,} batches" + (", under no_grad: an evaluation"
                                                        if loader.training_fraction == 0 else "") + ")"
                     for loader in run.loaders)
    return f"no training seen in the run: it iterated only {seen}"


def _replay_problem(run: RunReport, loader: LoaderRun) -> str | None:
    """Why a headspace run measured no ceiling: its replay never began, or too few replayed batches followed to
    time (its loaded batches are not data for free); None when it measured one."""
    kept = run.changes.replay if run.changes is not None else None
    if loader.replayed_after is None:
        return (f"the replay never began: the loader delivered {loader.batches} batches before the run ended, "
                f"not the {kept} to keep first")
    replayed = loader.batches - loader.replayed_after
    if replayed < MIN_REPLAYED:
        return (f"only {replayed} replayed batches followed the {loader.replayed_after} kept: too few to time "
                "the training with data for free (longer runs: --trial-seconds, --trial-steps)")
    return None


def trial_of_ranks(runs: Sequence[RunReport], config: KnobValues, role: str, site: str | None,
                   split: str | None = None, per_node: int | None = None,
                   hosts: Sequence[str] | None = None) -> TuneTrial:
    """One run of the training as several ranks (their reports in rank order) as a tune trial: failed when a
    rank failed (named); else the slowest rank's rate (in synchronous training every step waits for it), the
    data wait and step of the rank that waits most for data (the others wait for it inside their step), the CPU
    of every rank together and their peak memories added, and each rank's own figures; across nodes of
    ``per_node`` ranks each, its node too (ranks are numbered node by node, as torchrun's static rendezvous
    numbers them) and its host (``hosts``, by rank)."""
    trials = [trial_of(run, config, role, site, split) for run in runs]
    failed = sorted((rank for rank, trial in enumerate(trials) if not trial.ok),
                    key=lambda rank: (runs[rank].stop_cause == StopCause.PEER_FAILED,
                                      any(word in (trials[rank].error or "").lower() for word in PEER_GONE)))
    if failed:  # the rank whose own script failed, not those ended (or failing) because it did
        return dataclasses.replace(trials[failed[0]], error=f"rank {failed[0]}: {trials[failed[0]].error}")
    slowest = min(trials, key=lambda trial: trial.iterations_per_s or 0.0)
    pacing = max(trials, key=lambda trial: trial.data_wait_fraction or 0.0)
    cpu = [t.cpu_percent for t in trials if t.cpu_percent is not None]
    memory = [t.peak_memory_bytes for t in trials if t.peak_memory_bytes is not None]
    return dataclasses.replace(
        pacing, iterations_per_s=slowest.iterations_per_s, samples_per_s=slowest.samples_per_s,
        cpu_percent=sum(cpu) if cpu else None, peak_memory_bytes=sum(memory) if memory else None,
        wall_s=max(t.wall_s for t in trials),
        ranks=tuple(TuneRank(rank, t.iterations_per_s, t.data_wait_fraction, t.step_ms.p50 if t.step_ms else None,
                             None if per_node is None else rank // per_node,
                             None if per_node is None or hosts is None else hosts[rank])
                    for rank, t in enumerate(trials)))

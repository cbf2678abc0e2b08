"""``dataprof tune``'s decisions (pure): the next run of the training to try, and the answer from the runs.

The figure is the training's own: its iterations/s in a steady window. The search measures the script as it is
(``current``), then with its first batches replayed (``headspace``: data for free, the training's ceiling), the
loader-only sweep's pick when there is one, the script as it is again (so the noise of its runs is known before
anything is judged against it), then climbs ``num_workers`` around the config recommended so far while a
doubling gains beyond the noise (half as many when it does not), tries each of :data:`REFINEMENTS` once on top
of the config recommended then, and runs the contenders of a close call again. Among the configs within the noise
of the fastest, the one with the fewest workers and the least prefetch wins, as in a sweep."""

from __future__ import annotations

import ast
import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import LoaderSweep, TuneAnswer, TunedLoader, TuneReport, TuneTrial
from dataprof.results.vocabulary import StartMethod, TrialStatus, WorkerKind

NOISE_FLOOR = 0.05
"""The least relative noise a run of a training is taken to have (two runs alone say little of it)."""
CLIMB_TOP = 64
"""Worker counts past this are not tried."""
CONFIRM_RUNS = 3
"""Runs each contender of a close call gets (the recommended config, the fastest, the runner-up within the noise
of the fastest), while the budget lasts."""
SECOND_LOOK = 2.0
"""A config run once whose run fell short of the fastest by more than the noise but by no more than this many
times it is run once more: one run can land that far off (the noise is judged from two or three runs of yours),
and never looked at again it could hide the best config."""
REFINEMENTS: tuple[tuple[str, Callable[[Any, TunedLoader], Any]], ...] = (
    ("prefetch_factor", lambda now, loader: 2 * (now or 2)),
    ("persistent_workers", lambda now, loader: None if now or "persistent_workers" not in loader.settings else True),
    ("pin_memory", lambda now, loader: True if loader.device.startswith("cuda") and not now else None),
    ("multiprocessing_context", lambda now, loader: StartMethod.FORK.value if now and now != StartMethod.FORK
     and StartMethod.FORK in loader.start_methods else None),
    ("worker_kind", lambda now, loader: WorkerKind.THREAD.value if loader.threads and now != WorkerKind.THREAD
     else None),
)
"""The knobs tried after the worker climb, one run each, on top of the config recommended so far when it has
workers: the value tried, from the value in effect there and the loader tuned (None: nothing to try). Doubling
the prefetch rides out a slow batch; persistent workers skip the workers' start at every epoch (where the loader
has the knob: a ``torchdata.nodes`` pipeline has not); pinned batches
copy to a GPU faster, at the cost of a pinning thread (tried only on a GPU); workers that start by ``spawn`` or
``forkserver`` (set so, or the platform's default) start by ``fork`` faster, without the dataset pickled into
each (a script that needs them fresh, for CUDA in a worker, fails that run and the search goes on); threads of
the training process in place of worker processes (where they can load the dataset) pass batches without
pickling and hold no copies, but share the step's interpreter lock. ``in_order`` is not among them: it changes
the order the training sees its batches, which is the user's call (``sweep --in-order`` measures it)."""


def noise_of(current: Sequence[TuneTrial]) -> float:
    """The runs' relative noise: the spread of the current config's repeats over their mean, at least
    :data:`NOISE_FLOOR`."""
    rates = [t.iterations_per_s or 0.0 for t in current]
    if len(rates) < 2 or not statistics.fmean(rates):
        return NOISE_FLOOR
    return max(NOISE_FLOOR, (max(rates) - min(rates)) / statistics.fmean(rates))


def _key(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(config.items()))


def _rates(trials: Sequence[TuneTrial]) -> dict[tuple[tuple[str, Any], ...], list[tuple[int, TuneTrial]]]:
    """The completed runs of the training with its loader (not the headspace), by config."""
    found: dict[tuple[tuple[str, Any], ...], list[tuple[int, TuneTrial]]] = {}
    for index, trial in enumerate(trials):
        if trial.ok and trial.role != "headspace":
            found.setdefault(tuple(sorted(trial.config.items())), []).append((index, trial))
    return found


def _rate(runs: Sequence[tuple[int, TuneTrial]]) -> float:
    return statistics.median(t.iterations_per_s or 0.0 for _, t in runs)


def _cost(runs: Sequence[tuple[int, TuneTrial]], settings: dict[str, Any]) -> tuple[bool, int, int, bool, int]:
    """What a config costs, least first: whether it swaps the worker processes for threads (a new loader in your
    code, not a knob), its workers, its prefetch, whether it changes the script at all, memory."""
    trial = runs[0][1]
    config = {**settings, **trial.config}
    return (config.get("worker_kind") == WorkerKind.THREAD, int(config.get("num_workers") or 0),
            int(config.get("prefetch_factor") or 0), bool(trial.config), trial.peak_memory_bytes or 0)


def decide_tune(report: TuneReport) -> TuneReport:
    """``report`` with its answer made from its runs (none without a completed run of the script as it is)."""
    current = report.by_role("current")
    by_config = _rates(report.trials)
    if not current or not by_config:
        return dataclasses.replace(report, answer=None)
    noise = noise_of(current)
    mine = by_config[tuple(sorted(current[0].config.items()))]
    fastest = max(by_config.values(), key=_rate)
    top = _rate(fastest)
    within = [runs for runs in by_config.values() if (top - _rate(runs)) / top <= band(noise, runs, fastest)]
    chosen = min(within, key=lambda runs: _cost(runs, report.loader.settings if report.loader else {}))
    rate, base = _rate(chosen), _rate(mine)
    spread = band(noise, chosen, mine)
    headspace = report.by_role("headspace")
    ceiling = headspace[0].iterations_per_s if headspace else None
    picked = report.loader_sweep.config if report.loader_sweep is not None else None
    swept = by_config.get(_key(picked)) if picked is not None else None
    ranked = sorted(by_config.values(), key=_rate, reverse=True)
    return dataclasses.replace(report, answer=TuneAnswer(
        recommended=chosen[0][0], gain_over_current=rate / base - 1 if base else None,
        gain_range=(rate * (1 - spread) / (base * (1 + spread)) - 1, rate * (1 + spread) / (base * (1 - spread)) - 1)
        if base else None,
        data_cost_fraction=_cost_of(base, ceiling), recommended_data_cost_fraction=_cost_of(rate, ceiling),
        noise=noise, reason=_reason(chosen, fastest, mine, noise), step_slowdown=_slowdowns(report.trials),
        loader_sweep_rank=None if swept is None else (ranked.index(swept) + 1, len(ranked)),
        loader_sweep_vs_recommended=None if swept is None or not rate else _rate(swept) / rate - 1))


def band(noise: float, one: Sequence[tuple[int, TuneTrial]], other: Sequence[tuple[int, TuneTrial]]) -> float:
    """How far apart the medians of two configs' runs may be by noise alone: one run's ``noise`` over the square
    root of the fewer runs either had (the median of n runs wanders about 1/√n as far), at least the floor."""
    return max(NOISE_FLOOR, noise / math.sqrt(min(len(one), len(other))))


def _cost_of(rate: float | None, ceiling: float | None) -> float | None:
    """``1 − rate ÷ ceiling``: what data loading costs the training (0 when it is at its ceiling)."""
    return None if not rate or not ceiling else max(0.0, 1 - rate / ceiling)


def _slowdowns(trials: Sequence[TuneTrial]) -> dict[int, float]:
    """Each run's step p50 over the headspace's, less one: its workers competing with the step for CPUs."""
    head = next((t for t in trials if t.role == "headspace" and t.ok and t.step_ms), None)
    base = (head.step_ms or {}).get("p50") if head is not None else None
    if not base:
        return {}
    return {i: (t.step_ms or {})["p50"] / base - 1 for i, t in enumerate(trials)
            if t.ok and t.role != "headspace" and (t.step_ms or {}).get("p50")}


def _reason(chosen: Sequence[tuple[int, TuneTrial]], fastest: Sequence[tuple[int, TuneTrial]],
            mine: Sequence[tuple[int, TuneTrial]], noise: float) -> str:
    """Why ``chosen`` is recommended, in words."""
    if chosen is mine:
        return (f"your own config is the fastest within the noise (±{100 * band(noise, mine, fastest):.0f}%) or the "
                "cheapest of those: nothing to change")
    if chosen is fastest:
        return f"the fastest run, beyond the noise (±{100 * noise:.0f}% a run) of any cheaper one"
    gap = 1 - _rate(chosen) / _rate(fastest)
    return (f"within the noise (±{100 * band(noise, chosen, fastest):.0f}%) of the fastest "
            f"({_label(fastest[0][1].config)}: −{100 * gap:.1f}%) and cheaper")


def _label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "as the script has it"


def next_run(report: TuneReport) -> tuple[dict[str, Any], str] | None:
    """The next run of the training to try (the knobs to set on its loader, and its role), or None when the
    search is done: the script as it is, the headspace, the loader-only sweep's pick (when there is one), the
    script's own config once more for the noise, the climb of ``num_workers`` around the config recommended so far
    (twice as many while a doubling gains beyond the noise; half as many when it does not), each of
    :data:`REFINEMENTS` on top of the config recommended then, then more runs of the contenders of a close call
    (:func:`_confirmation`)."""
    roles = [t.role for t in report.trials]
    if "current" not in roles:
        return {}, "current"
    if "headspace" not in roles:
        return {}, "headspace"
    current = report.by_role("current")
    if not current or report.loader is None or report.answer is None:
        return None
    seen = {_key(t.config) for t in report.trials if t.role != "headspace"}
    picked = report.loader_sweep.config if report.loader_sweep is not None else None
    if picked and _key(picked) not in seen:
        return picked, "sweep"
    if roles.count("current") < 2:
        return {}, "current"
    step = _climb(report, seen) or _refinement(report, seen)
    if step is not None:
        return step, "candidate"
    return _confirmation(report)


def _confirmation(report: TuneReport) -> tuple[dict[str, Any], str] | None:
    """More runs where one may change the answer. First a second look at each config run once that fell short of
    the fastest beyond the noise but within :data:`SECOND_LOOK` times it; then a close call: the recommended
    config, the fastest, and the fastest other one when it is within the noise of the fastest are the contenders,
    one more run of the contender with the fewest runs (then the one run longer ago), up to :data:`CONFIRM_RUNS`
    each, so the noise decides where it matters. None when nothing is left to look at."""
    assert report.answer is not None
    rates = _rates(report.trials)
    chosen = rates[_key(report.trials[report.answer.recommended].config)]
    ranked = sorted(rates.values(), key=_rate, reverse=True)
    fastest = ranked[0]
    tries = [_key(t.config) for t in report.trials if t.role != "headspace"]  # failed runs count too
    noise = report.answer.noise

    def gap(runs: Sequence[tuple[int, TuneTrial]]) -> float:
        """How far short of the fastest, in noise bands."""
        return (_rate(fastest) - _rate(runs)) / _rate(fastest) / band(noise, runs, fastest)

    look = next((runs for runs in ranked if len(runs) == 1 and tries.count(_key(runs[0][1].config)) == 1
                 and 1 < gap(runs) <= SECOND_LOOK), None)
    if look is not None:
        return _again(look[0][1])
    contenders = [chosen, fastest]
    runner_up = next((runs for runs in ranked if runs is not fastest), None)
    if runner_up is not None and gap(runner_up) <= 1:
        contenders.append(runner_up)
    if len({id(runs) for runs in contenders}) < 2:
        return None
    again = min((runs for runs in contenders if tries.count(_key(runs[0][1].config)) < CONFIRM_RUNS),
                key=lambda runs: (len(runs), runs[-1][0]), default=None)  # the fewer runs, then the older
    return None if again is None else _again(again[0][1])


def _again(trial: TuneTrial) -> tuple[dict[str, Any], str]:
    """The config of ``trial`` to run once more, in its role."""
    return dict(trial.config), "current" if not trial.config else trial.role


def _as_changed(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the knobs the script sets to the same values: a run's overrides."""
    return {k: v for k, v in config.items() if settings.get(k) != v}


def _climb(report: TuneReport, seen: set[tuple[tuple[str, Any], ...]]) -> dict[str, Any] | None:
    """Twice the recommended config's workers (two, from none: one worker loads no faster than the training's
    own process, it only overlaps the step, so from none it may seem to pay nothing where two would) until a
    doubling does not pay beyond the noise, then half as many (as fast and cheaper?); None when both are run, or
    once a refinement is recommended."""
    assert report.answer is not None and report.loader is not None
    settings = report.loader.settings
    base = report.trials[report.answer.recommended].config
    if _refined(base, report):
        return None
    workers = int({**settings, **base}.get("num_workers") or 0)
    rates = _rates(report.trials)
    more = _as_changed({**base, "num_workers": max(2, 2 * workers)}, settings)
    if 2 * workers <= CLIMB_TOP and _key(more) not in seen:
        return more
    paid = _key(more) in rates and _rate(rates[_key(more)]) > _rate(rates[_key(base)]) * (1 + report.answer.noise)
    fewer = _as_changed({**base, "num_workers": workers // 2}, settings)
    if not paid and workers > 1 and _key(fewer) not in seen:
        return fewer
    return None


def _refined(config: dict[str, Any], report: TuneReport) -> bool:
    """Whether ``config`` sets a knob of :data:`REFINEMENTS` its own way (not the script's, nor the loader-only
    sweep's pick): the climb is over once such a config is recommended."""
    picked = (report.loader_sweep.config if report.loader_sweep is not None else None) or {}
    return any(knob in config and picked.get(knob) != config[knob] for knob, _ in REFINEMENTS)


def _refinement(report: TuneReport, seen: set[tuple[tuple[str, Any], ...]]) -> dict[str, Any] | None:
    """The first of :data:`REFINEMENTS` no run has set its own way yet, on top of the config recommended so far,
    when that has workers and the knob has a value to try there; None when none is left."""
    assert report.answer is not None and report.loader is not None
    base = report.trials[report.answer.recommended].config
    settings = {**report.loader.settings, **base}
    if not settings.get("num_workers"):
        return None
    for knob, value_of in REFINEMENTS:
        if any(_refined({knob: t.config[knob]}, report) for t in report.trials if knob in t.config):
            continue
        value = value_of(settings.get(knob), report.loader)
        config = _as_changed({**base, knob: value}, report.loader.settings)
        if value is not None and _key(config) not in seen:
            return config
    return None


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
    knobs = {k: v for k, v in config.dataloader_kwargs().items() if loader.settings.get(k) != v}
    if config.threads:
        if loader.threads is None:
            return dataclasses.replace(swept, label=label, samples_per_s=rate,
                                       error="its pick loads in threads, which cannot load your training's loader")
        knobs = {**knobs, "worker_kind": WorkerKind.THREAD.value}
    return dataclasses.replace(swept, config=knobs, label=label, samples_per_s=rate)


def tuned_loader(run: RunReport, site: str | None) -> LoaderRun | None:
    """The loader a run tunes: the one built at ``site`` (``--loader``), else the busiest; None when the script
    iterated none."""
    if site is not None:
        return next((loader for loader in run.loaders if loader.site == site or loader.site.endswith("/" + site)),
                    None)
    return run.loaders[0] if run.loaders else None


def others_note(run: RunReport, tuned: LoaderRun) -> str | None:
    """The loaders of the run other than the ``tuned`` one, named: they are left as the script builds them, and
    their epochs between the tuned loader's batches are not the training's time; None when there are none."""
    others = [loader for loader in run.loaders if loader is not tuned]
    if not others:
        return None
    named = "; ".join(f"{loader.site} ({loader.loader_class}, {loader.batches:,} batches)" for loader in others)
    return (f"other loaders, left as your script builds them: {named}. Their epochs run between the tuned "
            "loader's batches (a validation pass) are not counted in the training's iterations/s; "
            "--loader FILE:LINE tunes another")


def loader_of(loader: LoaderRun, device: str = "cpu") -> TunedLoader:
    """The tuned loader as the report names it, with its knobs as the script set them (its workers' kind where
    they are threads, as a ``torchdata.nodes`` pipeline's are), and the ``device`` the training ran on."""
    settings = {"num_workers": loader.num_workers, "prefetch_factor": loader.prefetch_factor,
                "persistent_workers": loader.persistent_workers, "pin_memory": loader.pin_memory,
                "multiprocessing_context": loader.start_method,
                "worker_kind": WorkerKind.THREAD.value if loader.worker_kind == WorkerKind.THREAD else None}
    return TunedLoader(loader.site, loader.loader_class, loader.batch_size,
                       {k: v for k, v in settings.items() if v is not None}, device)


def trial_of(run: RunReport, config: dict[str, Any], role: str, site: str | None) -> TuneTrial:
    """One run of the training as a tune trial: its loader's steady figures; failed when the script ended with
    an error of its own or iterated no loader."""
    resources: dict[str, Any] = {"cpu_percent": run.resources.cpu_percent,
                                 "peak_memory_bytes": run.resources.peak_memory_bytes,
                                 "gpu_util_percent": run.resources.gpu_util_percent, "wall_s": run.wall_s}
    if run.ended_by is None and run.exit_code:
        return TuneTrial(config, TrialStatus.FAILED, role, error=f"the script exited with code {run.exit_code}",
                         **resources)
    loader = tuned_loader(run, site)
    if loader is None or not loader.iterations_per_s:
        why = "the script iterated no DataLoader" if loader is None else "no steady batches to time: give it " \
              "longer (--trial-seconds, --trial-steps)"
        return TuneTrial(config, TrialStatus.FAILED, role, error=why, **resources)
    step = loader.step_ms or {}
    return TuneTrial(config, TrialStatus.OK, role,
                     iterations_per_s=loader.iterations_per_s,
                     samples_per_s=(loader.iterations_per_s or 0.0) * loader.batch_size if loader.batch_size
                     else loader.samples_per_s, data_wait_fraction=loader.data_wait_fraction,
                     step_ms={k: step[k] for k in ("p50", "p95") if k in step} or None,
                     startup_s=loader.first_batch_s[0] if loader.first_batch_s else None, **resources)


def trial_of_ranks(runs: Sequence[RunReport], config: dict[str, Any], role: str, site: str | None) -> TuneTrial:
    """One run of the training as several ranks (their reports in rank order) as a tune trial: failed when a
    rank failed (named); else the slowest rank's rate (in synchronous training every step waits for it), the
    data wait and step of the rank that waits most for data (the others wait for it inside their step), the CPU
    of every rank together and their peak memories added, and each rank's own figures."""
    trials = [trial_of(run, config, role, site) for run in runs]
    for rank, trial in enumerate(trials):
        if not trial.ok:
            return dataclasses.replace(trial, error=f"rank {rank}: {trial.error}")
    slowest = min(trials, key=lambda trial: trial.iterations_per_s or 0.0)
    pacing = max(trials, key=lambda trial: trial.data_wait_fraction or 0.0)
    cpu = [t.cpu_percent for t in trials if t.cpu_percent is not None]
    memory = [t.peak_memory_bytes for t in trials if t.peak_memory_bytes is not None]
    return dataclasses.replace(
        pacing, iterations_per_s=slowest.iterations_per_s, samples_per_s=slowest.samples_per_s,
        cpu_percent=sum(cpu) if cpu else None, peak_memory_bytes=sum(memory) if memory else None,
        wall_s=max(t.wall_s for t in trials),
        ranks=tuple({"rank": rank, "iterations_per_s": t.iterations_per_s, "data_wait_fraction": t.data_wait_fraction,
                     "step_ms_p50": (t.step_ms or {}).get("p50")} for rank, t in enumerate(trials)))

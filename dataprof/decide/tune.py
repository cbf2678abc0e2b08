"""``dataprof tune``'s decisions (pure): the next run of the training to try, and the answer from the runs.

The figure is the training's own: its iterations/s in a steady window. The search measures the script as it is
(``current``), then with its first batches replayed (``headspace``: data for free, the training's ceiling), then
climbs ``num_workers`` from the script's own while a doubling gains beyond the noise, tries half as many when
the first doubling did not pay (as fast and cheaper?), then tries each of :data:`REFINEMENTS` once on top of the
config it would recommend so far (with workers), and measures the script's own config again so that the noise
of its runs is known. Among the configs within that noise of the fastest, the one with the fewest workers and
the least prefetch wins, as in a sweep.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.tune import TuneAnswer, TunedLoader, TuneReport, TuneTrial
from dataprof.results.vocabulary import TrialStatus

NOISE_FLOOR = 0.05
"""The least relative noise a run of a training is taken to have (two runs alone say little of it)."""
CLIMB_TOP = 64
"""Worker counts past this are not tried."""
REFINEMENTS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("prefetch_factor", lambda now: 2 * (now or 2)),
    ("persistent_workers", lambda now: None if now else True),
)
"""The knobs tried after the worker climb, one run each, on top of the config recommended so far when it has
workers: the value tried, from the value in effect there (None: nothing to try). Doubling the prefetch rides out
a slow batch; persistent workers skip the workers' start at every epoch. ``in_order`` is not among them (it
changes the order the training sees its batches, which is the user's call: ``sweep --in-order`` measures it),
nor ``pin_memory`` (it pays only for a copy to a GPU)."""


def noise_of(current: Sequence[TuneTrial]) -> float:
    """The runs' relative noise: the spread of the current config's repeats over their mean, at least
    :data:`NOISE_FLOOR`."""
    rates = [t.iterations_per_s or 0.0 for t in current]
    if len(rates) < 2 or not statistics.fmean(rates):
        return NOISE_FLOOR
    return max(NOISE_FLOOR, (max(rates) - min(rates)) / statistics.fmean(rates))


def _workers(config: dict[str, Any]) -> int:
    return int(config.get("num_workers") or 0)


def _rates(trials: Sequence[TuneTrial]) -> dict[tuple[tuple[str, Any], ...], list[tuple[int, TuneTrial]]]:
    """The completed runs of the training with its loader (not the headspace), by config."""
    found: dict[tuple[tuple[str, Any], ...], list[tuple[int, TuneTrial]]] = {}
    for index, trial in enumerate(trials):
        if trial.ok and trial.role != "headspace":
            found.setdefault(tuple(sorted(trial.config.items())), []).append((index, trial))
    return found


def _rate(runs: Sequence[tuple[int, TuneTrial]]) -> float:
    return statistics.median(t.iterations_per_s or 0.0 for _, t in runs)


def _cost(runs: Sequence[tuple[int, TuneTrial]]) -> tuple[int, int, int]:
    trial = runs[0][1]
    return (_workers(trial.config), int(trial.config.get("prefetch_factor") or 0), trial.peak_memory_bytes or 0)


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
    within = [runs for runs in by_config.values() if (top - _rate(runs)) / top <= noise]
    chosen = min(within, key=_cost)
    rate, base = _rate(chosen), _rate(mine)
    headspace = report.by_role("headspace")
    ceiling = headspace[0].iterations_per_s if headspace else None
    return dataclasses.replace(report, answer=TuneAnswer(
        recommended=chosen[0][0], gain_over_current=rate / base - 1 if base else None,
        gain_range=(rate * (1 - noise) / (base * (1 + noise)) - 1, rate * (1 + noise) / (base * (1 - noise)) - 1)
        if base else None,
        data_cost_fraction=_cost_of(base, ceiling), recommended_data_cost_fraction=_cost_of(rate, ceiling),
        noise=noise, reason=_reason(chosen, fastest, mine, noise), step_slowdown=_slowdowns(report.trials)))


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
        return (f"your own config is the fastest within the noise (±{100 * noise:.0f}%) or the cheapest of "
                "those: nothing to change")
    if chosen is fastest:
        return f"the fastest run, beyond the noise (±{100 * noise:.0f}%) of any cheaper one"
    gap = 1 - _rate(chosen) / _rate(fastest)
    return (f"within the noise (±{100 * noise:.0f}%) of the fastest ({_label(fastest[0][1].config)}: "
            f"−{100 * gap:.1f}%) and cheaper")


def _label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "as the script has it"


def next_run(report: TuneReport) -> tuple[dict[str, Any], str] | None:
    """The next run of the training to try (the knobs to set on its loader, and its role), or None when the
    search is done: the script as it is, the headspace, the climb of ``num_workers`` from the script's own
    (its loader's settings) while each doubling gains beyond the noise, half as many when the first doubling did
    not pay, each of :data:`REFINEMENTS` on top of the config recommended so far, and the script's own config once
    more for the noise."""
    roles = [t.role for t in report.trials]
    if "current" not in roles:
        return {}, "current"
    if "headspace" not in roles:
        return {}, "headspace"
    current = report.by_role("current")
    if not current or report.loader is None:
        return None
    workers_now = int(report.loader.settings.get("num_workers") or 0)
    noise, rates = noise_of(current), _rates(report.trials)
    tried = {tuple(sorted(t.config.items())) for t in report.trials if t.role == "candidate"}
    previous, count = _rate(rates[tuple(sorted(current[0].config.items()))]), max(1, 2 * workers_now)
    while count <= CLIMB_TOP:
        key = (("num_workers", count),)
        if key not in tried:
            return {"num_workers": count}, "candidate"
        if key not in rates or _rate(rates[key]) <= previous * (1 + noise):
            break  # it failed, or did not pay beyond the noise: the climb is over
        previous, count = _rate(rates[key]), 2 * count
    if workers_now > 1 and (("num_workers", workers_now // 2),) not in tried:
        return {"num_workers": workers_now // 2}, "candidate"
    refined = _refinement(report, tried)
    if refined is not None:
        return refined, "candidate"
    if len(current) < 2:
        return {}, "current"
    return None


def _refinement(report: TuneReport, tried: set[tuple[tuple[str, Any], ...]]) -> dict[str, Any] | None:
    """The first of :data:`REFINEMENTS` no run has set yet, on top of the config recommended so far, when that
    has workers and the knob has a value to try there; None when none is left."""
    if report.answer is None or report.loader is None:
        return None
    base = report.trials[report.answer.recommended].config
    settings = {**report.loader.settings, **base}
    if not settings.get("num_workers"):
        return None
    for knob, value_of in REFINEMENTS:
        if any(knob in key for key in ({k for k, _ in config} for config in tried)):
            continue
        value = value_of(settings.get(knob))
        if value is not None and (config := {**base, knob: value}) and tuple(sorted(config.items())) not in tried:
            return config
    return None


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


def loader_of(loader: LoaderRun) -> TunedLoader:
    """The tuned loader as the report names it, with its knobs as the script set them."""
    settings = {"num_workers": loader.num_workers, "prefetch_factor": loader.prefetch_factor,
                "persistent_workers": loader.persistent_workers, "pin_memory": loader.pin_memory}
    return TunedLoader(loader.site, loader.loader_class, loader.batch_size,
                       {k: v for k, v in settings.items() if v is not None})


def trial_of(run: RunReport, config: dict[str, Any], role: str, site: str | None) -> TuneTrial:
    """One run of the training as a tune trial: its loader's steady figures; failed when the script ended with
    an error of its own or iterated no loader."""
    resources: dict[str, Any] = {"cpu_percent": run.resources.cpu_percent,
                                 "peak_memory_bytes": run.resources.peak_memory_bytes,
                                 "wall_s": run.wall_s}
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

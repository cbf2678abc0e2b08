"""The trials of a sweep report as plain text, shared by the console and the HTML: the trial table, the
throughput curve, the search's steps and, under torchrun, each rank at the recommended config."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.decide.crashes import explained
from dataprof.decide.diagnose.facts import recommended_trial
from dataprof.render.view import num, percent
from dataprof.results.knobs import LoaderConfig
from dataprof.results.stats import best_by_workers, speedup
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import CacheMode, TrialStatus

TRIAL_COLUMNS = ("config", "samples/s", "±%", "×w0", "wait%", "1st s", "p95 ms", "CPU%", "PSS", "GPU%", "status",
                 "error")
"""Every column of the trial table; :func:`trial_columns` picks those a report needs."""


def trial_columns(report: Report, errors: bool = False) -> tuple[str, ...]:
    """The columns worth showing: GPU% with a GPU, status when a trial failed, the error text if asked."""
    failed = any(t.status != TrialStatus.OK for t in report.trials)
    hidden = {"GPU%"} if report.environment.simulated_device else set()
    if not failed and not errors:
        hidden.add("status")
    if not errors:
        hidden.add("error")
    return tuple(c for c in TRIAL_COLUMNS if c not in hidden)


@dataclass(frozen=True)
class TrialRow:
    """One trial of the table, its cells by column name."""

    cells: dict[str, str]
    chosen: bool
    """The recommended config."""
    ok: bool


def trial_rows(report: Report) -> list[TrialRow]:
    """Every trial, fastest first; failures last with their status."""
    baseline = report.baseline
    chosen = report.recommendation.config if report.recommendation and report.recommendation.cache == CacheMode.WARM \
        else None
    rows = []
    for t in sorted(report.trials, key=lambda t: (t.status != TrialStatus.OK, -(t.samples_per_s or 0.0))):
        mark = "★ " if t.config == chosen else "  "
        cells = {"config": mark + t.config.label(), "samples/s": num(t.samples_per_s, ",.1f"),
                 "±%": percent(t.samples_per_s_spread), "×w0": num(speedup(t, baseline), ".2f"),
                 "wait%": percent(t.wait_fraction), "1st s": num(t.first_batch_s, ".2f"),
                 "p95 ms": num(t.wait_ms.p95 if t.wait_ms else None, ".1f"), "CPU%": num(t.cpu.cpu_percent, ".0f"),
                 "PSS": fmt_bytes(t.memory.peak_memory_bytes), "GPU%": num(t.gpu.gpu_util_percent, ".0f"),
                 "status": t.status,
                 "error": explained(t.error) or ""}
        rows.append(TrialRow(cells, t.config == chosen, t.status == TrialStatus.OK))
    return rows


def throughput_curve(report: Report) -> list[tuple[str, float, bool]]:
    """(``w8``, best samples/s at that count, whether the recommendation has that count and kind) in worker
    order, worker processes then threads (``t8``); empty under two points."""
    ok = [t for t in report.trials if t.status == TrialStatus.OK and t.samples_per_s]
    curve = best_by_workers(ok) + [t for t in best_by_workers(ok, threads=True) if t.config.num_workers]
    if len(curve) < 2:
        return []
    chosen = report.recommendation.config if report.recommendation else None
    return [(t.config.short_label, t.samples_per_s or 0.0, chosen is not None and
             (t.config.num_workers, t.config.threads) == (chosen.num_workers, chosen.threads)) for t in curve]


def search_title(report: Report) -> str:
    """``Search: adaptive, 7 trials in 41 s``."""
    return f"Search: {report.settings.strategy}, {len(report.trials)} trials in {report.wall_s:.0f} s"


def search_steps(report: Report) -> list[tuple[int, str, str, str]]:
    """(number, config, its samples/s or status, why the search chose it), in the order run."""
    warm: dict[LoaderConfig, TrialResult] = {t.config: t for t in report.trials}
    cold: dict[LoaderConfig, TrialResult] = {t.config: t for t in report.cold_trials}
    rows = []
    for number, step in enumerate(report.search_steps, 1):
        trial = (cold if step.cache == CacheMode.COLD else warm).get(step.config)
        figure = "" if trial is None else (f"{trial.samples_per_s:,.1f} samples/s" if trial.samples_per_s
                                           else trial.status)
        rows.append((number, step.config.label(), figure, step.why))
    return rows


RANK_COLUMNS = ("rank", "node", "host", "samples/s", "±%", "wait%", "1st s", "CPU%", "PSS")


def rank_rows(report: Report) -> tuple[str, list[tuple[list[str], bool]], list[str]] | None:
    """Distributed sweeps: the title, each rank's cells at the recommended config (and whether it is the
    slowest, which sets the pace), then one line per node; None otherwise."""
    trial = recommended_trial(report)
    if trial is None or not trial.ranks:
        return None
    slowest = min(trial.ranks, key=lambda r: r.samples_per_s or 0.0)
    rows = [([str(r.rank), str(r.node), r.host or "?", num(r.samples_per_s, ",.1f"), percent(r.samples_per_s_spread),
              percent(r.wait_fraction), num(r.first_batch_s, ".2f"), num(r.cpu_percent, ".0f"),
              fmt_bytes(r.peak_memory_bytes)], r is slowest) for r in trial.ranks]
    usable = report.environment.usable_cpus * report.environment.local_world_size
    nodes = []
    for node in sorted({r.node for r in trial.ranks}):
        on = [r for r in trial.ranks if r.node == node]
        cpu = sum(r.cpu_percent or 0.0 for r in on)
        memory = sum(r.peak_memory_bytes or 0 for r in on)
        nodes.append(f"node {node} ({on[0].host or '?'}): {len(on)} ranks · loader CPU {cpu / 100:.1f} of "
                     f"{usable} usable CPUs · PSS {fmt_bytes(memory)}")
    return f"Ranks at {trial.config.label()} (the slowest sets the pace)", rows, nodes

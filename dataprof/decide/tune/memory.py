"""What a tune run's workers cost in memory (pure): the memory a count of workers would take, from the runs
measured, against the node's budget; the climb stops before it, as a sweep's does."""

from __future__ import annotations

from dataprof.decide.budgets import HEADROOM, memory_line
from dataprof.results.knobs import KnobValues
from dataprof.results.tune import TuneReport
from dataprof.results.units import fmt_bytes


def memory_at(report: TuneReport, workers: int) -> float | None:
    """The training's peak memory (PSS) with ``workers`` worker processes, from its runs: the sweep's memory line
    through their peaks by worker count (two counts or more), else the one count's peak with each worker weighing
    as much as each of its processes (an upper bound: forked workers share pages); None when no run measured
    memory."""
    settings = report.loader.settings if report.loader else KnobValues()
    points = [((settings | t.config).workers, t.peak_memory_bytes) for t in report.trials
              if t.ok and t.role != "headspace" and t.peak_memory_bytes and not (settings | t.config).threads]
    if not points:
        return None
    line = memory_line(points)
    if line is not None:
        return line.at(workers)
    count, peak = points[0][0], max(m for _, m in points)
    return peak + (workers - count) * peak / (count + 1)


def over_memory(report: TuneReport, workers: int) -> str | None:
    """Why ``workers`` worker processes are not tried: the memory they would take is past :data:`HEADROOM` of
    the memory available where the training ran; None when it is within, or not known."""
    available = report.loader.available_ram_bytes if report.loader else None
    need = memory_at(report, workers)
    if not available or need is None or need <= HEADROOM * available:
        return None
    return (f"num_workers={workers} not tried: it would take about {fmt_bytes(need)} of memory, past "
            f"{HEADROOM:.0%} of the {fmt_bytes(available)} available")

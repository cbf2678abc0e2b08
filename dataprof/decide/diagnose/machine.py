"""Findings about the machine the sweep ran on rather than the loader: other processes competing for its CPUs."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from dataprof.decide.diagnose.facts import ok_trials
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.sweep import Report
from dataprof.results.vocabulary import FindingId, Severity


def busy_machine(report: Report, th: Thresholds) -> Finding | None:
    """Other processes took CPU the trials could have used: the figures are noisier and the ceilings lower."""
    measured = [t.cpu.foreign_cpu_percent / 100.0 for t in ok_trials(report) if t.cpu.foreign_cpu_percent is not None]
    if not measured:
        return None
    typical, most = statistics.median(measured), max(measured)
    if typical < th.foreign_cpus:
        return None
    usable = report.environment.usable_cpus
    share = typical / usable
    return Finding(
        id=FindingId.BUSY_MACHINE,
        severity=Severity.WARNING if share >= th.foreign_warning else Severity.INFO,
        evidence=(f"other processes used {typical:.1f} of {usable} usable CPUs during the sweep (the median over "
                  f"{len(measured)} trials, up to {most:.1f}): the loader had about {max(1.0, usable - typical):.1f}, "
                  "and the figures are noisy (see ±% per trial); CPU ceilings count only the CPUs left"),
        recommendation=("Profile on a quiet machine (stop the other jobs: top shows them), or compare only configs "
                        "measured in the same run; re-run to confirm a close call."),
    )


MACHINE_RULES: tuple[Callable[[Report, Thresholds], Finding | None], ...] = (busy_machine,)

"""Diagnosis: pure rules over a Report's measurements.

``diagnose(report)`` returns the primary bottleneck of the recommended config
(one of :data:`PRIMARY_KINDS`) and the findings, the primary verdict first,
then the rest by severity. No rule runs a DataLoader, so
``dataprof diagnose run.json`` re-applies improved rules to old runs.
"""

from __future__ import annotations

from dataprof.decide.diagnose.findings import FINDING_RULES
from dataprof.decide.diagnose.machine import MACHINE_RULES
from dataprof.decide.diagnose.primary import PRIMARY_RULES
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.sweep import Report
from dataprof.results.vocabulary import FindingId

PRIMARY_KINDS = (FindingId.STORAGE_BOUND, FindingId.MODEL_BOUND, FindingId.TRANSFER_BOUND, FindingId.MAIN_PROCESS_BOUND,
                 FindingId.MEMORY_BOUND, FindingId.SHORT_EPOCH, FindingId.CPU_BOUND, FindingId.IO_BOUND)
"""The primary verdicts a sweep can reach, one per report."""


def diagnose(report: Report, thresholds: Thresholds | None = None) -> tuple[FindingId | None, tuple[Finding, ...]]:
    """The primary bottleneck's id (None if no rule fires) and every finding, the primary first, then by severity."""
    th = thresholds or Thresholds()
    primary = next((f for rule in PRIMARY_RULES if (f := rule(report, th)) is not None), None)
    others = [f for rule in (*FINDING_RULES, *MACHINE_RULES) if (f := rule(report, th)) is not None]
    others.sort(key=lambda f: -f.severity.rank)
    findings = ([primary] if primary is not None else []) + others
    return (primary.id if primary is not None else None), tuple(findings)


__all__ = ["PRIMARY_KINDS", "Thresholds", "diagnose"]

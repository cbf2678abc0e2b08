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

PRIMARY_KINDS = ("model_bound", "transfer_bound", "main_process_bound", "memory_bound", "short_epoch", "cpu_bound",
                 "io_bound")

TITLES = {
    "model_bound": "model-bound: the loader keeps up",
    "transfer_bound": "transfer-bound: host-to-device copies",
    "main_process_bound": "main-process-bound",
    "memory_bound": "memory-bound: RAM limits the worker count",
    "short_epoch": "short epochs: the loader restarts at every epoch",
    "cpu_bound": "CPU-bound",
    "io_bound": "I/O-bound: samples wait on something other than CPU",
    "copy_on_read": "copy-on-read memory growth",
    "worker_startup": "worker start-up",
    "stragglers": "slow samples (stragglers)",
    "iterable_duplicates": "IterableDataset duplicates",
    "rank_duplicates": "every rank loads the same stream",
    "shm_risk": "shared memory (/dev/shm)",
    "single_process": "workers never started",
    "rank_imbalance": "a slow rank sets the pace",
    "oversubscribed": "oversubscribed CPUs",
    "ipc_overhead": "worker overhead exceeds the work",
    "no_gpu": "simulated device",
    "busy_machine": "other processes compete for the CPUs",
}
"""Human names for each id (the ids are the JSON contract)."""

_ORDER = {"critical": 0, "warning": 1, "info": 2}


def diagnose(report: Report, thresholds: Thresholds | None = None) -> tuple[str | None, tuple[Finding, ...]]:
    """The primary bottleneck's id (None if no rule fires) and every finding, the primary first, then by severity."""
    th = thresholds or Thresholds()
    primary = next((f for rule in PRIMARY_RULES if (f := rule(report, th)) is not None), None)
    others = [f for rule in (*FINDING_RULES, *MACHINE_RULES) if (f := rule(report, th)) is not None]
    others.sort(key=lambda f: _ORDER.get(f.severity, 3))
    findings = ([primary] if primary is not None else []) + others
    return (primary.id if primary is not None else None), tuple(findings)


__all__ = ["PRIMARY_KINDS", "TITLES", "Thresholds", "diagnose"]

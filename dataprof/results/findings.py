"""Findings and gates: what a decision concluded, with the numbers behind it, in every kind of document."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.results.vocabulary import FindingId, Severity


@dataclass(frozen=True)
class GateResult:
    """One CI gate (``--min-throughput``, …): passed or not, and the numbers it compared."""

    gate: str
    passed: bool
    measured: float | None
    threshold: float
    message: str


@dataclass(frozen=True)
class Finding:
    """One diagnosis: its id (the JSON contract), severity, the numbers behind it and what to change."""

    id: FindingId
    severity: Severity
    evidence: str
    recommendation: str

"""Any saved document decided again by the current rules (``dataprof diagnose``), whatever its kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataprof.decide.inspect import decide_inspection
from dataprof.decide.plan import plan_again
from dataprof.decide.run import judge
from dataprof.decide.sweep import decide
from dataprof.decide.tune import decide_tune
from dataprof.results.inspect import Inspection
from dataprof.results.load import Document
from dataprof.results.plan import Plan
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport

DECIDERS: dict[type, Callable[[Any], Document]] = {Report: decide, RunReport: judge, Inspection: decide_inspection,
                                                   Plan: plan_again, TuneReport: decide_tune}
"""Each kind's decisions: a sweep's recommendation and diagnosis, a run's verdict, an inspection's checks, a
plan's prediction."""


def decide_again(document: Document) -> Document:
    """``document`` with every decision it carries made again from its measurements alone."""
    return DECIDERS[type(document)](document)

"""One interface for every renderer: ``render(document) -> str`` for any kind of document, as pyinstrument's
renderers take any session.

The kinds are a sweep's Report, a watched run's RunReport, an Inspection, a Plan, and the comparison of two sweeps or
two runs; each renderer maps every one of them (a test holds it). ``print_document`` writes one on a live
console (the terminal's width and colours), which is what the CLI shows.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, Protocol

from rich.console import Console

from dataprof.render import compare, html, inspect, plan, run, run_html, tune
from dataprof.render import sweep as sweep_report
from dataprof.results.compare import Comparison, RunComparison
from dataprof.results.inspect import Inspection
from dataprof.results.plan import Plan
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport

Rendered = Report | RunReport | Inspection | Plan | TuneReport | Comparison | RunComparison
"""What a renderer takes: a document, or two of a kind compared."""

PRINTERS: dict[type, Callable[[Console, Any], None]] = {
    Report: sweep_report.print_report, RunReport: run.print_run, Inspection: inspect.print_inspection,
    Plan: plan.print_plan, TuneReport: tune.print_tune, Comparison: compare.print_comparison,
    RunComparison: compare.print_comparison}
"""How each kind is printed on a console."""

PAGES: dict[type, Callable[[Any], str]] = {
    Report: html.sweep_page, RunReport: run_html.run_page, Inspection: html.inspection_page,
    Plan: plan.plan_page, TuneReport: tune.tune_page, Comparison: html.comparison_page,
    RunComparison: html.comparison_page}
"""Each kind's self-contained HTML page."""


class Renderer(Protocol):
    """Turns any document into text."""

    def render(self, document: Rendered) -> str:
        """The document as this renderer's text."""


def print_document(console: Console, document: Rendered) -> None:
    """Print ``document`` on ``console``, whatever its kind."""
    PRINTERS[type(document)](console, document)


class ConsoleRenderer:
    """The console report as plain text (no colour), as a log or a test sees it."""

    def __init__(self, width: int = 120) -> None:
        self.width = width

    def render(self, document: Rendered) -> str:
        """The report of ``document`` at this renderer's width."""
        buffer = io.StringIO()
        print_document(Console(width=self.width, file=buffer, color_system=None), document)
        return buffer.getvalue()


class HtmlRenderer:
    """A self-contained HTML page (a sweep's charts need plotly: ``html.check_available``)."""

    def render(self, document: Rendered) -> str:
        """The page of ``document``."""
        if isinstance(document, Report):
            html.check_available()
        return PAGES[type(document)](document)


RENDERERS: dict[str, Callable[[], Renderer]] = {"console": ConsoleRenderer, "html": HtmlRenderer}
"""Every renderer, by the name an option would give it."""

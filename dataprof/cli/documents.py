"""The commands on saved documents: ``diagnose`` (decide again, show), ``compare`` (two of a kind) and
``report`` (an HTML page), for any kind of document each reads."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dataprof.cli.output import console, guarded, reading, write_atomic
from dataprof.cli.params import OutputPath
from dataprof.errors import ExitCode, UsageError
from dataprof.results.compare import Comparison, RunComparison
from dataprof.results.vocabulary import Kind

DOCUMENT = click.Path(dir_okay=False, path_type=Path)
"""A saved ``--json`` document."""


@click.command()
@click.argument("document", type=DOCUMENT, metavar="DOCUMENT")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help="Write the re-diagnosed document here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def diagnose(document: Path, json_path: Path | None, debug: bool) -> None:
    """Re-read a saved --json document (a sweep, a `dataprof run` or a `dataprof inspect`), decide it again with
    the current rules, and render it."""
    from dataprof.decide.documents import decide_again
    from dataprof.render.documents import print_document
    from dataprof.results.load import load_document

    with reading(document):
        decided = decide_again(load_document(document))
        print_document(console(), decided)
    if json_path is not None:
        write_atomic(json_path, decided.to_json())


@click.command()
@click.argument("old", type=DOCUMENT)
@click.argument("new", type=DOCUMENT)
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT",
              help="Exit 1 if the recommended throughput fell by more than this.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def compare(old: Path, new: Path, max_regression: str, debug: bool) -> None:
    """Compare two saved --json documents of a kind (two sweeps, or two `dataprof run`s): side by side, the
    recommendation (or the busiest loader), the machines."""
    from dataprof.decide.compare import compare_documents
    from dataprof.render.documents import print_document
    from dataprof.results.load import kind_of, load_document
    from dataprof.results.run import RunReport
    from dataprof.results.sweep import Report
    from dataprof.results.text import parse_percent

    threshold = parse_percent(max_regression, "--max-regression")
    before, after = (load_document(path, (Kind.SWEEP, Kind.RUN)) for path in (old, new))
    if kind_of(before) is not kind_of(after):
        raise UsageError(f"{old} and {new}: one is a `dataprof run` document, the other a sweep's; compare two "
                         "of a kind")
    assert isinstance(before, (Report, RunReport)) and isinstance(after, (Report, RunReport))
    with reading(old, new):
        comparison = compare_documents(before, after, threshold)
        print_document(console(), comparison)
    if comparison.regressed(threshold):
        click.echo(_regression(comparison, threshold), err=True)
        sys.exit(int(ExitCode.GATE_FAILED))


def _regression(comparison: Comparison | RunComparison, threshold: float) -> str:
    """The line that says the headline rate fell past ``threshold``."""
    old, new = f"{comparison.old_rate or 0:,.1f}", f"{comparison.new_rate or 0:,.1f}"
    if isinstance(comparison, RunComparison):
        return f"regression: samples/s {old} → {new}, past the allowed −{100 * threshold:g}%"
    machines = "" if comparison.same_machine else " (across different environments)"
    return (f"regression: recommended throughput {old} → {new} samples/s, past the allowed −{100 * threshold:g}%"
            f"{machines}")


@click.command()
@click.argument("document", type=DOCUMENT, metavar="DOCUMENT")
@click.option("--html", "html_path", type=OutputPath(), required=True,
              help="Write the self-contained HTML report here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def report(document: Path, html_path: Path, debug: bool) -> None:
    """Render a saved --json document as a self-contained HTML report: a sweep (charts, diagnosis, every trial),
    a `dataprof run` (verdict, loaders, resources) or a `dataprof inspect` (samples, stages, checks)."""
    from dataprof.render.documents import HtmlRenderer
    from dataprof.results.load import load_document

    with reading(document):
        page = HtmlRenderer().render(load_document(document))
    write_atomic(html_path, page)
    click.echo(f"wrote {html_path}", err=True)

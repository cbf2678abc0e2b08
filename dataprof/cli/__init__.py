"""Command line: parse the options, call the orchestration (api, sweeper), render, write files, exit code.

Glue only: what to measure, decide and show lives in the layers below; the option choices come from their
registries. One module per command group: ``sweep``, ``inspect``, ``run``, ``tune``, ``plan``, and ``documents``
(``diagnose``, ``compare``, ``report`` on saved documents).
"""

from __future__ import annotations

from typing import Any

import click

from dataprof.cli.documents import compare, diagnose, report
from dataprof.cli.inspect import inspect
from dataprof.cli.output import fail
from dataprof.cli.plan import plan
from dataprof.cli.run import run
from dataprof.cli.sweep import sweep
from dataprof.cli.tune import tune
from dataprof.errors import DataprofError
from dataprof.version import __version__


class Commands(click.Group):
    """``dataprof``'s commands: an option whose text cannot be read (its ParamType raises a UsageError while
    click parses) ends in one line and exit 2, as every DataprofError of a command does."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command ``ctx`` names, its options parsed."""
        try:
            return super().invoke(ctx)
        except DataprofError as exc:
            fail(exc, debug="--debug" in ctx.args)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dataprof")
def main() -> None:
    """Find the DataLoader settings that feed your model fastest, measured on this machine."""


for command in (sweep, diagnose, inspect, plan, compare, report, run, tune):
    main.add_command(command)

"""``dataprof inspect``: time one dataset's samples, stages and batches here; show, save, exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from dataprof.cli.options import FRAMEWORK_CHOICES, target_options
from dataprof.cli.output import console, guarded, write_atomic
from dataprof.cli.params import OutputPath
from dataprof.errors import ExitCode


@click.command()
@target_options
@click.option("--samples", type=click.IntRange(min=1), default=200, show_default=True,
              help="Samples to time: random indices (the first N items of an IterableDataset).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random indices.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Batch size for the collate, /dev/shm and open-file figures [default: a DataLoader target's "
                   "own, else 64].")
@click.option("--prefetch-factor", type=click.IntRange(min=1), default=None,
              help="Batches each worker keeps in flight, for the /dev/shm and open-file checks [default: a "
                   "DataLoader target's own, else 2].")
@click.option("--max-seconds", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Stop fetching samples after this long and report what was measured.")
@click.option("--collate-fn", default=None, metavar="MOD:ATTR", help="Collate function to use.")
@click.option("--framework", type=click.Choice(FRAMEWORK_CHOICES), default="auto", show_default=True,
              help="Whose default collate and thread settings apply; auto: paddle for a paddle.io dataset.")
@click.option("--cpus", type=int, default=None, metavar="N",
              help="Measure pinned to N of the usable CPUs (affinity), the CPU ceiling for N [default: all].")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help="Write the inspect document here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def inspect(target: str, args: tuple[tuple[str, Any], ...], samples: int, seed: int, batch_size: int | None,
            prefetch_factor: int | None, max_seconds: float, collate_fn: str | None, framework: str, cpus: int | None,
            json_path: Path | None, debug: bool) -> None:
    """Time TARGET's samples, transform stages and collation in this process; check its limits."""
    from dataprof.decide.inspect import analyse, fatal
    from dataprof.decide.settings import pinned
    from dataprof.errors import TargetError
    from dataprof.measure.environment import cpu_budget
    from dataprof.measure.inspect.samples import Interrupted, run_inspection
    from dataprof.render.documents import print_document
    from dataprof.results.inspect_data import InspectSettings

    pinned(cpu_budget(), cpus)  # a UsageError for more than there are
    settings = InspectSettings(target=target, kwargs=dict(args), samples=samples, seed=seed, batch_size=batch_size,
                               prefetch_factor=prefetch_factor, max_seconds=max_seconds, collate_fn=collate_fn,
                               framework=framework, cpus=cpus)
    click.echo(f"inspecting {target}: up to {samples} samples or {max_seconds:g} s …", err=True)
    interrupted = False
    try:
        data = run_inspection(settings)
    except Interrupted as exc:
        data, interrupted = exc.data, True
    inspection = analyse(data)
    print_document(console(), inspection)
    if json_path is not None:
        write_atomic(json_path, inspection.to_json())
        click.echo(f"wrote {json_path}", err=True)
    if interrupted:
        click.echo("interrupted: partial results shown", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    failed = fatal(inspection)
    if failed is not None:
        raise TargetError(failed.evidence)

"""``dataprof run``: the command that watches a training script (its options, gates, output and exit code)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dataprof.cli.output import console, failed_gates, guarded, write_atomic, write_page
from dataprof.cli.params import OutputPath
from dataprof.errors import ExitCode, UsageError


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", is_flag=True, help="SCRIPT is a module name, run as python -m runs it.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, metavar="N",
              help="End the watch, and stop the script cleanly, once the busiest DataLoader delivered N batches "
                   "(exit 0 with the report: a CI smoke test).")
@click.option("--seconds", type=click.FloatRange(min=0.1), default=None, metavar="S",
              help="End the watch, and stop the script, at the first batch after S seconds.")
@click.option("--override", default=None, metavar="KNOBS",
              help="Set these loader knobs where the script builds its DataLoaders, the rest as it has them "
                   "(num_workers=8,prefetch_factor=4): try a config in your own training without editing it.")
@click.option("--replay", type=click.IntRange(min=1), default=None, metavar="N",
              help="Replay each loader's first N batches in its place (the same objects, again and again for "
                   "the rest of each epoch): the training's speed with data for free, its ceiling.")
@click.option("--loader", "loader_site", default=None, metavar="FILE:LINE",
              help="Change only the loader built at FILE:LINE (as the report names it) [default: every loader].")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help='Write the run document ("kind": "run") here.')
@click.option("--html", "html_path", type=OutputPath(), default=None,
              help="Also write a self-contained HTML page of the run.")
@click.option("--max-data-wait", default=None, metavar="PCT",
              help="Gate: exit 1 if the busiest loader's steady-state data wait exceeds PCT of each iteration.")
@click.option("--min-gpu-util", type=click.FloatRange(min=0, max=100), default=None, metavar="PCT",
              help="Gate: exit 1 if the mean GPU utilisation is below PCT (or was not measured).")
@click.option("--min-throughput", type=click.FloatRange(min=0), default=None, metavar="N",
              help="Gate: exit 1 if the busiest loader delivers fewer samples/s.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Gate: a saved run document to compare with (see --max-regression).")
@click.option("--max-regression", default=None, metavar="PCT",
              help="With --baseline: exit 1 if samples/s fell by more than this (default 10%).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@guarded
def run(module: bool, max_steps: int | None, seconds: float | None, override: str | None, replay: int | None,
        loader_site: str | None, json_path: Path | None, html_path: Path | None,
        max_data_wait: str | None, min_gpu_util: float | None, min_throughput: float | None,
        baseline_path: Path | None, max_regression: str | None, debug: bool, script: str,
        script_args: tuple[str, ...]) -> None:
    """Watch your training script, unchanged, and say whether it waits for data.

    dataprof's options come before SCRIPT; everything after it is the script's own argv:
    dataprof run [OPTIONS] train.py --epochs 1
    """
    import dataclasses

    from dataprof.api import run as run_watched
    from dataprof.decide.gates import RunGates, evaluate_run
    from dataprof.decide.run import rank_cause
    from dataprof.distributed import rank_from_env
    from dataprof.measure.watch.gather import gather_runs
    from dataprof.measure.watch.joining import meeting_of
    from dataprof.measure.watch.launched import Launched
    from dataprof.render.documents import print_document
    from dataprof.results.load import load_as
    from dataprof.results.run import RunReport
    from dataprof.results.text import parse_percent

    if max_regression is not None and baseline_path is None:
        raise UsageError("--max-regression needs --baseline OLD.json to compare with")
    baseline = load_as(baseline_path, RunReport) if baseline_path is not None else None
    gates = RunGates(max_data_wait=None if max_data_wait is None else parse_percent(max_data_wait, "--max-data-wait"),
                     min_gpu_util=min_gpu_util, min_throughput=min_throughput,
                     max_regression=None if baseline is None else parse_percent(max_regression or "10%",
                                                                                "--max-regression"))
    rank, alone = rank_from_env(), Launched().cannot_meet()
    seconds = _alone(alone, rank is None or rank.rank == 0, seconds)
    report = run_watched(script, script_args, module=module, max_steps=max_steps, seconds=seconds,
                         override=override, replay=replay, loader=loader_site)
    if alone is not None and rank is not None and rank.rank != 0:
        sys.exit(report.exit_code or 0)
    if rank is not None and alone is None:  # under torchrun: rank 0 reports for every rank
        meeting = meeting_of()
        assert meeting is not None  # a rank of a job
        gathered = gather_runs(report, rank, meeting)
        if gathered is None:
            sys.exit(report.exit_code or 0)
        report = rank_cause(gathered)
    if gates.any():
        report = dataclasses.replace(report, gates=evaluate_run(report, gates, baseline))
    print_document(console(), report)
    if json_path is not None:
        write_atomic(json_path, report.to_json())
        click.echo(f"wrote {json_path}", err=True)
    write_page(html_path, report)
    failed = failed_gates(report.gates)
    if not report.complete:
        sys.exit(int(ExitCode.INTERRUPTED))
    if report.ended_by is None and report.exit_code:
        sys.exit(report.exit_code)
    if failed:
        sys.exit(int(ExitCode.GATE_FAILED))


def _alone(why: str | None, says: bool, seconds: float | None) -> float | None:
    """``--seconds`` as it applies to a rank that cannot meet the others (``why``; None: it can): not at all, never
    half a job ended; said in one line where ``says`` (rank 0)."""
    if why is None:
        return seconds
    if says:
        click.echo(f"warning: {why}: its dataprof cannot meet the other ranks' (start them with torchrun); each "
                   f"rank is watched alone, to its end{' (--seconds not applied)' if seconds else ''}, and rank 0 "
                   "reports its own", err=True)
    return None

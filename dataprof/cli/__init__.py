"""Command line: parse the options, call the orchestration (api, sweeper), render, write files, exit code.

Glue only: what to measure, decide and show lives in the layers below
(ARCHITECTURE.md); the option choices come from their registries.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from dataprof.cli.options import FRAMEWORK_CHOICES, SETTINGS_OPTIONS, sweep_options, target_options
from dataprof.cli.output import console, guarded, write_atomic
from dataprof.errors import ExitCode, UsageError
from dataprof.results.vocabulary import Severity
from dataprof.version import __version__


def _read(path: Path) -> Any:
    """A saved --json run (UsageError if it is not one)."""
    from dataprof.api import read_result

    return read_result(path)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dataprof")
def main() -> None:
    """Find the DataLoader settings that feed your model fastest, measured on this machine."""


@main.command()
@sweep_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def sweep(**params: Any) -> None:
    """Measure DataLoader configs over TARGET (pkg.mod:Attr or path/file.py:Attr): a Dataset, a DataLoader or a
    function returning one (its knobs swept, the rest kept), or a LightningDataModule."""
    from dataprof.api import sweep_settings
    from dataprof.distributed import Coordinator, follow_rank_0, rank_from_env
    from dataprof.sweeper import SweepInterrupted, run_sweep

    rank = rank_from_env()
    if params["nproc_per_node"] is not None and params["nproc_per_node"] > 1:
        _launch_ranks(params, rank)
    gates, baseline = _gates(params)
    settings = sweep_settings(**{name: params[name] for name in SETTINGS_OPTIONS}, rank=rank)
    if params["html_path"] is not None:
        from dataprof.render.html import check_available

        check_available()
    resume = _read(params["resume_path"]) if params["resume_path"] is not None else None
    json_path = params["json_path"] or params["resume_path"]
    coordinator = None if rank is None else Coordinator(rank, timeout_s=max(600.0, 10 * params["trial_timeout"]))
    if coordinator is not None and not coordinator.leader:  # it measures; only rank 0 reports
        try:
            follow_rank_0(coordinator, lambda: run_sweep(settings, list(params["args"]), resume=resume,
                                                         coordinator=coordinator))
        except SweepInterrupted:
            sys.exit(int(ExitCode.INTERRUPTED))
        return
    report = _lead(settings, list(params["args"]), json_path, resume, coordinator)
    _finish(report, gates, baseline, json_path, params["html_path"])


def _launch_ranks(params: dict[str, Any], rank: Any) -> None:
    """--nproc-per-node: run the same sweep as that many ranks here; exit with the run's code."""
    from dataprof.distributed import launch_ranks

    if rank is not None:
        raise UsageError(f"--nproc-per-node: this already runs under torchrun as rank {rank.rank} of "
                         f"{rank.world_size}; give the rank count to torchrun only")
    code, message = launch_ranks(params["nproc_per_node"], _rank_entry, dict(params, nproc_per_node=None))
    if message is not None:
        kept = f"; the trials measured before are in {params['json_path']}" if params["json_path"] else ""
        click.echo(f"error: {message}{kept}", err=True)
    sys.exit(code)


def _gates(params: dict[str, Any]) -> tuple[Any, Any]:
    """The CI gates asked for, and the --baseline run they compare with (None without)."""
    from dataprof.cli.params import parse_percent
    from dataprof.decide.gates import Gates

    if params["max_regression"] is not None and params["baseline_path"] is None:
        raise UsageError("--max-regression needs --baseline OLD.json to compare with")
    baseline = _read(params["baseline_path"]) if params["baseline_path"] is not None else None
    regression = None if baseline is None else parse_percent(params["max_regression"] or "10%", "--max-regression")
    return Gates(min_throughput=params["min_throughput"], min_speedup=params["min_speedup"],
                 fail_on=None if params["fail_on"] is None else Severity(params["fail_on"]),
                 max_regression=regression), baseline


def _lead(settings: Any, args: list[str], json_path: Path | None, resume: Any, coordinator: Any) -> Any:
    """Run the sweep with progress on stderr, saving the JSON after every trial. An interrupted sweep
    prints and keeps what it measured (exit 130); a target error prints the trials measured before it."""
    from dataprof.render import console as console_render
    from dataprof.render.progress import make_observer
    from dataprof.sweeper import SweepInterrupted, SweepTargetError, run_sweep

    out = console()
    observer, finish = make_observer(out)
    try:
        return run_sweep(settings, args, observer=observer, on_update=lambda report: _save(json_path, report),
                         resume=resume, coordinator=coordinator)
    except SweepInterrupted as exc:
        finish()
        _save(json_path, exc.report)
        console_render.print_report(out, exc.report)
        click.echo("interrupted: partial results kept" + (f" in {json_path}" if json_path else ""), err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except SweepTargetError as exc:
        finish()
        _save(json_path, exc.report)
        if exc.report.trials:  # what was measured is shown before the error line
            console_render.print_report(out, exc.report)
        raise
    finally:
        finish()
        if coordinator is not None:
            coordinator.close()


def _finish(report: Any, gates: Any, baseline: Any, json_path: Path | None, html_path: Path | None) -> None:
    """Evaluate the gates, print the report, write the files; exit 1 when a gate failed."""
    from dataprof.decide.gates import evaluate
    from dataprof.render import console as console_render

    if gates.any():
        report = dataclasses.replace(report, gates=evaluate(report, gates, baseline))
        _save(json_path, report)
    console_render.print_report(console(), report)
    if json_path is not None:
        click.echo(f"wrote {json_path}", err=True)
    if html_path is not None:
        from dataprof.render import html as html_render

        write_atomic(html_path, html_render.render(report))
        click.echo(f"wrote {html_path}", err=True)
    failed = [g for g in report.gates if not g.passed]
    for gate in failed:
        click.echo(f"gate failed: {gate.gate}: {gate.message}", err=True)
    if failed:
        sys.exit(int(ExitCode.GATE_FAILED))


def _save(json_path: Path | None, report: Any) -> None:
    """Write the --json document, if one was asked for."""
    if json_path is not None:
        write_atomic(json_path, report.to_json())


def _rank_entry(params: dict[str, Any]) -> None:
    """One rank started by --nproc-per-node: the same sweep, with torchrun's environment set."""
    assert sweep.callback is not None
    sweep.callback(**params)


@main.command()
@click.argument("run", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the re-diagnosed document here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def diagnose(run: Path, json_path: Path | None, debug: bool) -> None:
    """Re-read a saved --json document (a sweep or a `dataprof run`), decide it again with the current rules,
    and render it."""
    from dataprof.api import read_document
    from dataprof.results.run import RunReport

    document = read_document(run)
    if isinstance(document, RunReport):
        from dataprof.decide.run import judge
        from dataprof.render.run import print_run

        judged = judge(document)
        print_run(console(), judged)
        text = judged.to_json()
    else:
        from dataprof.decide.sweep import decide
        from dataprof.render import console as console_render

        report = decide(document)
        console_render.print_report(console(), report)
        text = report.to_json()
    if json_path is not None:
        write_atomic(json_path, text)


@main.command()
@target_options
@click.option("--samples", type=click.IntRange(min=1), default=200, show_default=True,
              help="Samples to time: random indices (the first N items of an IterableDataset).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random indices.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Batch size for the collate, /dev/shm and open-file figures.")
@click.option("--prefetch-factor", type=click.IntRange(min=1), default=2, show_default=True,
              help="Batches each worker keeps in flight, for the /dev/shm and open-file checks.")
@click.option("--max-seconds", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Stop fetching samples after this long and report what was measured.")
@click.option("--collate-fn", default=None, metavar="MOD:ATTR", help="Collate function to use.")
@click.option("--framework", type=click.Choice(FRAMEWORK_CHOICES), default="auto", show_default=True,
              help="Whose default collate and thread settings apply; auto: paddle for a paddle.io dataset.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the inspect document here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def inspect(target: str, args: tuple[str, ...], samples: int, seed: int, batch_size: int, prefetch_factor: int,
            max_seconds: float, collate_fn: str | None, framework: str, json_path: Path | None,
            debug: bool) -> None:
    """Time TARGET's samples, transform stages and collation in this process; check its limits."""
    from dataprof.backends.target import parse_kwarg
    from dataprof.decide.inspect import analyse, fatal
    from dataprof.errors import TargetError
    from dataprof.measure.inspect.samples import InspectSettings, Interrupted, run_inspection
    from dataprof.render import inspect as inspect_render

    for item in args:
        parse_kwarg(item)
    settings = InspectSettings(target=target, args=args, samples=samples, seed=seed, batch_size=batch_size,
                               prefetch_factor=prefetch_factor, max_seconds=max_seconds, collate_fn=collate_fn,
                               framework=framework)
    click.echo(f"inspecting {target}: up to {samples} samples or {max_seconds:g} s …", err=True)
    interrupted = False
    try:
        data = run_inspection(settings)
    except Interrupted as exc:
        data, interrupted = exc.data, True
    inspection = analyse(data)
    inspect_render.print_inspection(console(), inspection)
    if json_path is not None:
        write_atomic(json_path, inspection.to_json())
        click.echo(f"wrote {json_path}", err=True)
    if interrupted:
        click.echo("interrupted: partial results shown", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    failed = fatal(inspection)
    if failed is not None:
        raise TargetError(failed.evidence)


@main.command()
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT",
              help="Exit 1 if the recommended throughput fell by more than this.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def compare(old: Path, new: Path, max_regression: str, debug: bool) -> None:
    """Compare two saved --json documents of a kind (two sweeps, or two `dataprof run`s): side by side, the
    recommendation (or the busiest loader), the machines."""
    from dataprof.api import read_document
    from dataprof.cli.params import parse_percent
    from dataprof.decide.compare import compare as compare_sweeps
    from dataprof.decide.compare import compare_runs
    from dataprof.render.compare import print_comparison, print_run_comparison
    from dataprof.results.run import RunReport

    threshold = parse_percent(max_regression, "--max-regression")
    before, after = read_document(old), read_document(new)
    if isinstance(before, RunReport) != isinstance(after, RunReport):
        raise UsageError(f"{old} and {new}: one is a `dataprof run` document, the other a sweep's; compare two "
                         "of a kind")
    if isinstance(before, RunReport) and isinstance(after, RunReport):
        watched = compare_runs(before, after)
        print_run_comparison(console(), watched, threshold)
        if watched.regressed(threshold):
            click.echo(f"regression: samples/s {watched.old_rate or 0:,.1f} → {watched.new_rate or 0:,.1f}, past "
                       f"the allowed −{100 * threshold:g}%", err=True)
            sys.exit(int(ExitCode.GATE_FAILED))
        return
    assert not isinstance(before, RunReport) and not isinstance(after, RunReport)
    comparison = compare_sweeps(before, after)
    print_comparison(console(), comparison, threshold)
    if comparison.regressed(threshold):
        machines = "" if comparison.same_machine else " (across different environments)"
        click.echo(f"regression: recommended throughput {comparison.old_rate or 0:,.1f} → "
                   f"{comparison.new_rate or 0:,.1f} samples/s, past the allowed −{100 * threshold:g}%{machines}",
                   err=True)
        sys.exit(int(ExitCode.GATE_FAILED))


@main.command()
@click.argument("run", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Write the self-contained HTML report here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def report(run: Path, html_path: Path, debug: bool) -> None:
    """Render a saved --json document as a self-contained HTML report: a sweep (charts, diagnosis, every trial)
    or a `dataprof run` (verdict, loaders, resources)."""
    from dataprof.api import read_document
    from dataprof.results.run import RunReport

    document = read_document(run)
    if isinstance(document, RunReport):
        from dataprof.render.run_html import run_page

        write_atomic(html_path, run_page(document))
    else:
        from dataprof.render import html as html_render

        html_render.check_available()
        write_atomic(html_path, html_render.render(document))
    click.echo(f"wrote {html_path}", err=True)


def _add_commands() -> None:
    """Commands that live in modules of their own."""
    from dataprof.cli.run import run

    main.add_command(run)


_add_commands()

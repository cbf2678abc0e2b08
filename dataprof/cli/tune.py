"""``dataprof tune``: the training itself as the trial (its options, output and exit code)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dataprof.cli.output import console, guarded, write_atomic, write_page
from dataprof.cli.params import OutputPath
from dataprof.errors import ExitCode, UsageError
from dataprof.results.tune import TuneAnswer
from dataprof.results.vocabulary import TuneVerdict


def parse_budget(text: str) -> float:
    """``--budget``: seconds, or ``90s``, ``5m``, ``1h``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        seconds = float(value) * unit
    except ValueError:
        raise UsageError(f"--budget {text!r}: expected seconds, or a time like 90s, 5m, 1h") from None
    if not seconds > 0:
        raise UsageError(f"--budget {text!r}: must be above 0")
    return seconds


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", is_flag=True, help="SCRIPT is a module name, run as python -m runs it.")
@click.option("--budget", default="5m", show_default=True, metavar="TIME",
              help="End within this long (90s, 5m, 1h): no run starts that the runs so far say would end past it; "
                   "the first two (your settings, the headspace) run whatever it is.")
@click.option("--trial-seconds", type=click.FloatRange(min=1), default=10.0, show_default=True, metavar="S",
              help="End each run of the training at its first batch S seconds after its first batch (the start-up "
                   "apart).")
@click.option("--trial-steps", type=click.IntRange(min=10), default=None, metavar="N",
              help="End each run once its loader delivered N batches (whichever comes first with --trial-seconds).")
@click.option("--startup-timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, metavar="S",
              help="How long the first run may take to reach its training's first batch (imports, building the "
                   "dataset, an evaluation first); later runs allow three times its start-up.")
@click.option("--try-fork", is_flag=True,
              help="Also try fork in place of a start method your script sets for its workers (spawn for a library "
                   "that is not fork-safe is kept otherwise).")
@click.option("--loader", "loader_site", default=None, metavar="FILE:LINE",
              help="Tune the loader built at FILE:LINE [default: the one the training iterates most].")
@click.option("--loader-sweep/--no-loader-sweep", default=True, show_default=True,
              help="When a function builds the loader, sweep it alone first and run its pick in the training too.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True, metavar="P",
              help="Run the training as P ranks of one job on this machine (torchrun's environment set for each), "
                   "every rank with the same knobs; a run's figure is its slowest rank's.")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Run each run of the training over N nodes: give the same command on every node, each with its "
                   "--node-rank; node 0 decides the runs, tells the others and reports.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, metavar="K",
              help="With --nnodes: this node's index (0 decides and reports).")
@click.option("--master-addr", default="127.0.0.1", show_default=True, metavar="HOST",
              help="With --nnodes: node 0's address, which every node reaches.")
@click.option("--master-port", type=click.IntRange(min=1, max=65534), default=29510, show_default=True,
              metavar="PORT", help="With --nnodes: node 0 serves the tune's meeting at PORT and each run's ranks "
                                   "meet at PORT+1 (not torchrun's 29500, so a job's own launch may run beside).")
@click.option("--join-timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, metavar="S",
              help="With --nnodes: how long a node waits for the others (to reach node 0, in each run's start "
                   "and end), and how long a node may fall silent during a run before node 0 stops it.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Run each run of the training in its own directory under DIR (DIR/run-N), so what it writes "
                   "(checkpoints, logs) stays apart; the paths it is given are then read from there.")
@click.option("--max-data-cost", default=None, metavar="PCT",
              help="Gate: exit 1 if data loading costs your training more than PCT of its speed, as it is, beyond "
                   "the band of its runs (or if that cost could not be measured); 5 if the band straddles PCT.")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help='Write the tune document ("kind": "tune") here.')
@click.option("--html", "html_path", type=OutputPath(), default=None,
              help="Also write a self-contained HTML page of it.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@guarded
def tune(module: bool, budget: str, trial_seconds: float, trial_steps: int | None, startup_timeout: float,
         try_fork: bool, loader_site: str | None,
         loader_sweep: bool, nproc_per_node: int, nnodes: int, node_rank: int, master_addr: str, master_port: int,
         join_timeout: float, workdir: str | None, max_data_cost: str | None,
         json_path: Path | None,
         html_path: Path | None, debug: bool,
         script: str, script_args: tuple[str, ...]) -> None:
    """Tune the loader inside your training: run SCRIPT, unchanged, once per config tried (num_workers, then
    prefetch_factor, persistent_workers and threads, set where it builds its busiest DataLoader), and once with that
    loader's first batches replayed (data for free); answer with the training's own iterations/s and what data
    loading costs it.

    The script runs several times, each run a fresh process cut short after --trial-seconds or --trial-steps:
    whatever it writes (checkpoints, logs), it writes each time. dataprof's options come before SCRIPT;
    everything after it is the script's own argv: dataprof tune [OPTIONS] train.py --epochs 1
    """
    from dataprof.api import follow_tune
    from dataprof.api import tune as run_tune
    from dataprof.render.documents import print_document
    from dataprof.results.environment import NodeJob
    from dataprof.results.text import parse_percent

    gate = None if max_data_cost is None else parse_percent(max_data_cost, "--max-data-cost")
    out = console()
    nodes = None
    if nnodes > 1 or node_rank:
        nodes = NodeJob(nnodes, node_rank, master_addr, master_port, join_timeout)
        nodes.check()
    progress = lambda line: click.echo(f"dataprof tune: {line}", err=True)  # noqa: E731
    if nodes is not None and not nodes.leader:
        runs = follow_tune(script, script_args, nodes=nodes, module=module, nproc_per_node=nproc_per_node,
                           progress=progress, workdir=workdir)
        progress(f"node {node_rank}: {runs} run(s) made as node 0 said; node 0 reports")
        return
    report = run_tune(script, script_args, module=module, budget_s=parse_budget(budget), trial_seconds=trial_seconds,
                      trial_steps=trial_steps, loader=loader_site, loader_sweep=loader_sweep,
                      nproc_per_node=nproc_per_node, workdir=workdir, progress=progress, nodes=nodes,
                      startup_timeout_s=startup_timeout, try_fork=try_fork)
    print_document(out, report)
    if json_path is not None:
        write_atomic(json_path, report.to_json())
        click.echo(f"wrote {json_path}", err=True)
    write_page(html_path, report)
    if not report.complete:
        click.echo(f"{'error: ' + report.error if report.error else 'interrupted'}: the runs measured are kept"
                   + (f" in {json_path}" if json_path else ""), err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    answer = report.answer
    if gate is not None:
        _gate(answer, gate)
    if answer is None or answer.recommended is None:
        reason = answer.reason if answer is not None else report.error or "nothing compared"
        if answer is not None and answer.verdict == TuneVerdict.CANNOT_TELL:
            click.echo(reason, err=True)
            sys.exit(int(ExitCode.CANNOT_TELL))
        click.echo(f"error: {reason}", err=True)
        sys.exit(int(ExitCode.NO_COMPARISON))


def _gate(answer: TuneAnswer | None, gate: float) -> None:
    """``--max-data-cost``: exit 1 when data loading costs the training more than ``gate`` beyond its band (or its
    cost was not measured), 5 when the band straddles ``gate``."""
    cost = answer.data_cost_fraction if answer is not None else None
    if answer is None or cost is None:
        click.echo("gate failed: data loading's cost to your training not measured (the run with data for free did "
                   "not complete)", err=True)
        sys.exit(int(ExitCode.GATE_FAILED))
    low, high = answer.data_cost_range or (cost, cost)
    measured = f"data loading costs your training {cost:.0%} of its speed ({low:.0%} to {high:.0%})"
    if low > gate:
        click.echo(f"gate failed: {measured}, more than --max-data-cost {gate:.0%}", err=True)
        sys.exit(int(ExitCode.GATE_FAILED))
    if high > gate:
        click.echo(f"cannot tell: {measured}, a band that straddles --max-data-cost {gate:.0%}: more runs (a larger "
                   "--budget) or a quieter machine would settle it", err=True)
        sys.exit(int(ExitCode.CANNOT_TELL))

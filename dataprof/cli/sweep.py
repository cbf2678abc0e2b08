"""``dataprof sweep``: parse its options, run the sweep (ranks included), show and save the report, exit code."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from dataprof.cli.options import sweep_options
from dataprof.cli.output import console, failed_gates, guarded, write_atomic, write_page
from dataprof.errors import ExitCode, UsageError
from dataprof.results.registry import REGISTRY
from dataprof.results.request import LoadOptions, SweepOptions, SweepRequest, TrialBudgets
from dataprof.results.vocabulary import Severity


def _read_sweep(path: Path) -> Any:
    """A saved sweep result (UsageError if it is not one)."""
    from dataprof.results.load import load_as
    from dataprof.results.sweep import Report

    return load_as(path, Report)


@click.command()
@sweep_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def sweep(**params: Any) -> None:
    """Measure DataLoader configs over TARGET (pkg.mod:Attr or path/file.py:Attr): a Dataset, a DataLoader or a
    function returning one (its knobs swept, the rest kept), or a LightningDataModule."""
    from dataprof.api import sweep_settings
    from dataprof.distributed import Coordinator, RankLost, follow_rank_0, rank_from_env
    from dataprof.sweeper import SweepInterrupted, run_sweep

    rank = rank_from_env()
    if params["nproc_per_node"] is not None and params["nproc_per_node"] > 1:
        _launch_ranks(params, rank)
    gates, baseline = _gates(params)
    settings = sweep_settings(request_of(params), rank)
    if params["html_path"] is not None:
        from dataprof.render.html import check_available

        check_available()
    resume = _read_sweep(params["resume_path"]) if params["resume_path"] is not None else None
    json_path = params["json_path"] or params["resume_path"]
    coordinator = None if rank is None else Coordinator(rank, timeout_s=max(600.0, 10 * params["trial_timeout"]))
    say_lost = not params.get(LAUNCHER_SPEAKS)  # under --nproc-per-node the launcher names a rank that died
    if coordinator is not None and not coordinator.leader:  # it measures; only rank 0 reports
        coordinator.watch_peers(lambda why: _gone(why, None, json_path))
        try:
            follow_rank_0(coordinator, lambda: run_sweep(settings, resume=resume, coordinator=coordinator))
        except SweepInterrupted:
            sys.exit(int(ExitCode.INTERRUPTED))
        except RankLost as exc:
            _gone(exc.message, None, json_path, say_lost)
        return
    report = _lead(settings, json_path, resume, coordinator, say_lost)
    _finish(report, gates, baseline, json_path, params["html_path"])


def request_of(params: dict[str, Any]) -> SweepRequest:
    """What the options ask the sweep for, typed (click's ParamTypes have read their text)."""
    return SweepRequest(
        load=LoadOptions(target=params["target"], kwargs=dict(params["args"]), collate_fn=params["collate_fn"],
                         framework=params["framework"], split=params["split"], batch_size=params["batch_size"],
                         shuffle=params["shuffle"]),
        sweep=SweepOptions(workers=params["workers"], strategy=params["strategy"],
                           **{knob.space_key: params[knob.keyword_name] for knob in REGISTRY},
                           rules_of_thumb=params["rules_of_thumb"],
                           autotune_steps=params["autotune_steps"], current=params["current"]),
        budgets=TrialBudgets(step_ms=params["step_ms"], device=params["device"], require_gpu=params["require_gpu"],
                             trial_seconds=params["trial_seconds"], trial_timeout_s=params["trial_timeout"],
                             memory_limit=params["memory_limit"], cpus=params["cpus"],
                             cache=params["cache"]))


LAUNCHER_SPEAKS = "launcher_speaks"
"""Set in the parameters of a rank that ``--nproc-per-node`` started: a rank that died is named by the launcher,
so a rank that saw it leave the group says nothing of it."""

DEFAULT_REGRESSION = 0.1
"""``--max-regression`` left out beside ``--baseline``: a fall of more than 10% fails the gate."""


def _launch_ranks(params: dict[str, Any], rank: Any) -> None:
    """--nproc-per-node: run the same sweep as that many ranks here; exit with the run's code."""
    from dataprof.measure.launch import launch_ranks

    if rank is not None:
        raise UsageError(f"--nproc-per-node: this already runs under torchrun as rank {rank.rank} of "
                         f"{rank.world_size}; give the rank count to torchrun only")
    launched = launch_ranks(params["nproc_per_node"], _rank_entry, dict(params, nproc_per_node=None,
                                                                        **{LAUNCHER_SPEAKS: True}),
                            short_grace=True)  # a sweep's rank ends at once on SIGTERM, unless it is stopped
    if launched.died is not None:
        kept = f"; the trials measured before are in {params['json_path']}" if params["json_path"] else ""
        click.echo(f"error: {launched.died}; the sweep stopped on every rank{kept}", err=True)
    sys.exit(launched.code)


def _gates(params: dict[str, Any]) -> tuple[Any, Any]:
    """The CI gates asked for, and the --baseline run they compare with (None without)."""
    from dataprof.decide.gates import Gates

    if params["max_regression"] is not None and params["baseline_path"] is None:
        raise UsageError("--max-regression needs --baseline OLD.json to compare with")
    baseline = _read_sweep(params["baseline_path"]) if params["baseline_path"] is not None else None
    regression = None if baseline is None else params["max_regression"] or DEFAULT_REGRESSION
    return Gates(min_throughput=params["min_throughput"], min_speedup=params["min_speedup"],
                 fail_on=None if params["fail_on"] is None else Severity(params["fail_on"]),
                 max_regression=regression), baseline


def _lead(settings: Any, json_path: Path | None, resume: Any, coordinator: Any, say_lost: bool = True) -> Any:
    """Run the sweep with progress on stderr, saving the JSON after every trial. An interrupted sweep
    prints and keeps what it measured (exit 130); a target error prints the trials measured before it."""
    from dataprof.distributed import RankLost
    from dataprof.render.documents import print_document
    from dataprof.render.progress import make_observer
    from dataprof.sweeper import SweepInterrupted, SweepTargetError, run_sweep

    out = console()
    observer, finish = make_observer(out)
    latest: list[Any] = []
    warned = False

    def update(report: Any) -> None:
        nonlocal warned
        latest[:] = [report]
        try:
            _save(json_path, report)
        except UsageError as exc:  # the sweep goes on: its report is printed, and the file tried again at its end
            if not warned:
                click.echo(f"warning: {exc}; the sweep goes on", err=True)
            warned = True

    def gone(why: str, say: bool = True) -> None:
        finish()
        _gone(why, latest[0] if latest else None, json_path, say)

    if coordinator is not None:
        coordinator.watch_peers(gone)
    try:
        return run_sweep(settings, observer=observer, on_update=update, resume=resume, coordinator=coordinator)
    except SweepInterrupted as exc:
        finish()
        print_document(out, exc.report)
        kept = _saved(json_path, exc.report)
        click.echo("interrupted: partial results kept" + (f" in {json_path}" if kept else ""), err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except SweepTargetError as exc:
        finish()
        if exc.report.trials:  # what was measured is shown before the error line
            print_document(out, exc.report)
        _saved(json_path, exc.report)
        raise
    except RankLost as exc:  # the measured trials were saved as each ended
        gone(exc.message, say_lost)
    finally:
        finish()
        if coordinator is not None:
            coordinator.close()


def _gone(why: str, report: Any, json_path: Path | None, say: bool = True) -> NoReturn:
    """A rank the sweep waits for went silent (called from the thread that watches the ranks, while this one may
    wait in a collective no signal ends), or left the group (a collective failed): what was measured (rank 0),
    one line (unless ``say`` is False: the launcher names the rank that died), and this rank's end, at once (its
    hosts and trials end with it)."""
    from dataprof.measure.launch import RANK_DIED
    from dataprof.render.documents import print_document

    if report is not None and report.trials:
        print_document(console(), report)
    kept = f"; the trials measured before are in {json_path}" if json_path and report is not None else ""
    if say:
        click.echo(f"error: {why}; the sweep stopped on this rank{kept}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(RANK_DIED)


def _finish(report: Any, gates: Any, baseline: Any, json_path: Path | None, html_path: Path | None) -> None:
    """Evaluate the gates, print the report, write the files; exit 1 when a gate failed."""
    from dataprof.decide.gates import evaluate
    from dataprof.render.documents import print_document

    if gates.any():
        report = dataclasses.replace(report, gates=evaluate(report, gates, baseline))
    print_document(console(), report)
    if json_path is not None:  # written after each trial too; a file that could not be written then, now or never
        _save(json_path, report)
        click.echo(f"wrote {json_path}", err=True)
    write_page(html_path, report)
    if failed_gates(report.gates):
        sys.exit(int(ExitCode.GATE_FAILED))


def _saved(json_path: Path | None, report: Any) -> bool:
    """:func:`_save`, on the way out of a sweep that ended early: whether it wrote the file (why not, in a line)."""
    try:
        _save(json_path, report)
    except UsageError as exc:
        click.echo(f"error: {exc}", err=True)
        return False
    return json_path is not None


def _save(json_path: Path | None, report: Any) -> None:
    """Write the --json document, if one was asked for."""
    if json_path is not None:
        write_atomic(json_path, report.to_json())


def _rank_entry(params: dict[str, Any]) -> None:
    """One rank started by --nproc-per-node: the same sweep, with torchrun's environment set."""
    assert sweep.callback is not None
    sweep.callback(**params)

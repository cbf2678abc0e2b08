"""The Python API: ``dataprof.sweep(...)``, ``dataprof.inspect(...)`` and ``dataprof.plan(...)``, the same work
as the CLI.

``sweep`` and ``inspect`` accept a Dataset object or a target string (``pkg.mod:Attr`` or
``path/file.py:Attr``). A Dataset object is measured by a host process forked
from this one, so it needs no import path (a class defined in a notebook
works); it is measured as it is at the call. Errors are
:class:`dataprof.errors.DataprofError` subclasses with the CLI's messages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dataprof.render.notebook import NotebookInspection, NotebookReport, shown
from dataprof.results.environment import NodeJob, RankInfo
from dataprof.results.inspect import Inspection
from dataprof.results.plan import NodeGroup, Plan
from dataprof.results.registry import REGISTRY
from dataprof.results.request import (
    LoadOptions,
    MemoryLimit,
    SweepOptions,
    SweepRequest,
    TrialBudgets,
    current_config,
)
from dataprof.results.run import RunReport
from dataprof.results.settings import SweepSettings
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport


def sweep_settings(request: SweepRequest, rank: RankInfo | None = None) -> SweepSettings:
    """The settings ``request`` plans on this machine: with its CPU budget (each rank's share under torchrun)
    and its available RAM, read here (``decide.settings.plan``)."""
    from dataprof.decide.settings import settings_for
    from dataprof.measure.environment import available_ram, cpu_budget

    return settings_for(request, cpu_budget(ranks_per_node=rank.local_world_size if rank else 1), available_ram(), rank)


def _knobs(given: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs' values given to the API, by their ``SweepOptions`` field: each one value, a list, or its option's
    text (``"on,off"``), as its record (:data:`~dataprof.results.knobs.REGISTRY`) says; a knob left out takes its
    option's default. A UsageError names a keyword that is no knob."""
    from dataprof.errors import UsageError
    from dataprof.results.text import parse_knob

    knobs = {knob.keyword_name: knob for knob in REGISTRY}
    unknown = sorted(set(given) - set(knobs))
    if unknown:
        raise UsageError(f"sweep(): {', '.join(unknown)} is not a keyword of it; its knobs are {', '.join(knobs)}")
    values = {}
    for name, knob in knobs.items():
        value = given.get(name, knob.default)
        if value is not None and not isinstance(value, (str, tuple)):
            value = (value,) if isinstance(value, (bool, int)) else tuple(value)
        values[knob.space_key] = parse_knob(knob, value) if isinstance(value, str) else value
    return values


def _name(obj: Any) -> str:
    return f"python:{type(obj).__name__}@{id(obj):x}"


def sweep(dataset_or_target: Any, *, batch_size: int | None = None, workers: Any = "auto", step_ms: float = 0.0,
          device: str = "auto", strategy: str = "adaptive", trial_seconds: float = 3.0, trial_timeout: float = 60.0,
          memory_limit: str | int = "80%", collate_fn: str | Callable[[list[Any]], Any] | None = None,
          shuffle: bool = False, rules_of_thumb: bool = True, args: Mapping[str, Any] | None = None,
          progress: bool = False, framework: str = "auto", autotune_steps: int = 50, split: str = "train",
          current: str | Mapping[str, Any] | None = None, cpus: int | None = None, cache: str = "auto",
          **knobs: Any) -> Report:
    """Sweep DataLoader configurations and return the :class:`~dataprof.results.sweep.Report` the CLI renders.

    ``dataset_or_target``: a Dataset, a DataLoader (its knobs are swept, the rest kept), a
    LightningDataModule (its ``<split>_dataloader()``), or an import path. ``report.best``,
    ``report.current`` (your settings against the best), ``report.diagnosis``, ``report.to_json()``; in
    Jupyter the report displays itself. ``args`` are keyword arguments for a class or factory target.
    ``batch_size`` None: a DataLoader's own, else 64. ``current``: your settings for a Dataset target
    (``{"num_workers": 8}`` or ``"num_workers=8"``). ``cpus``: pin the trials to that many of the usable CPUs.
    ``cache``: when to measure cold (``"auto"``, ``"warm"``, ``"cold"``, ``"both"``; ``--cache``).
    ``progress=True`` prints a line per trial on stderr. ``workers`` is a list (``[0, 2, 4]``) or ``"auto"``;
    ``memory_limit`` is bytes or a CLI size (``"3GB"``, ``"80%"``).
    ``**knobs``: each knob's values to sweep, by its option's name (``prefetch_factor=[2, 4]``,
    ``pin_memory="on,off"``, ``persistent_workers``, ``in_order=[True, False]``, ``start_method=["forkserver"]``,
    ``worker_kind="process,thread"``; Paddle's ``use_shared_memory``, ``use_buffer_reader``): one value, a list,
    or the option's text; left out, the option's default (``worker_kind`` None: threads where the evidence calls
    for them).
    """
    from dataprof.errors import UsageError
    from dataprof.render.progress import plain_observer
    from dataprof.results.text import parse_current, parse_size, parse_workers
    from dataprof.sweeper import run_sweep

    objects: dict[str, Any] = {}
    target = dataset_or_target
    if not isinstance(dataset_or_target, str):
        target = _name(dataset_or_target)
        objects[target] = dataset_or_target
    collate_name = collate_fn if isinstance(collate_fn, str) or collate_fn is None else _name(collate_fn)
    if callable(collate_fn):
        if isinstance(dataset_or_target, str):
            raise UsageError("a collate_fn callable needs a Dataset object; with a target string, "
                             "pass collate_fn as 'module:attr'")
        objects[_name(collate_fn)] = collate_fn
    request = SweepRequest(
        load=LoadOptions(target=target, kwargs=dict(args or {}), collate_fn=collate_name, framework=framework,
                         split=split, batch_size=batch_size, shuffle=shuffle),
        sweep=SweepOptions(
            workers=parse_workers(workers) if isinstance(workers, str) else
            None if workers is None else (workers,) if isinstance(workers, int) else tuple(workers),
            **_knobs(knobs), strategy=strategy, rules_of_thumb=rules_of_thumb, autotune_steps=autotune_steps,
            current=parse_current(current) if isinstance(current, str) else
            None if current is None else current_config(current)),
        budgets=TrialBudgets(step_ms=step_ms, device=device, trial_seconds=trial_seconds, cpus=cpus, cache=cache,
                             trial_timeout_s=trial_timeout,
                             memory_limit=parse_size(memory_limit) if isinstance(memory_limit, str)
                             else MemoryLimit(bytes=memory_limit)))
    observer = plain_observer(sys.stderr) if progress else None
    return shown(run_sweep(sweep_settings(request), observer=observer, objects=objects), NotebookReport)


def inspect(dataset_or_target: Any, *, samples: int = 200, seed: int = 0, batch_size: int | None = None,
            prefetch_factor: int | None = None, max_seconds: float = 60.0,
            collate_fn: str | Callable[[list[Any]], Any] | None = None,
            args: Mapping[str, Any] | None = None, framework: str = "auto", cpus: int | None = None) -> Inspection:
    """Time samples, transform stages and collation in this process; return the
    :class:`~dataprof.results.inspect.Inspection` the CLI renders (``.to_json()``; displays itself in Jupyter).
    ``batch_size``, ``prefetch_factor`` None: a DataLoader's own, else 64 and 2."""
    from dataprof.decide.inspect import analyse
    from dataprof.decide.settings import pinned
    from dataprof.measure.environment import cpu_budget
    from dataprof.measure.inspect.samples import run_inspection
    from dataprof.results.inspect_data import InspectSettings

    pinned(cpu_budget(), cpus)  # a UsageError for more than there are
    is_object = not isinstance(dataset_or_target, str)
    settings = InspectSettings(
        target=_name(dataset_or_target) if is_object else dataset_or_target,
        kwargs=dict(args or {}), samples=samples, seed=seed, batch_size=batch_size,
        prefetch_factor=prefetch_factor, max_seconds=max_seconds,
        collate_fn=collate_fn if isinstance(collate_fn, str) else None,
        dataset=dataset_or_target if is_object else None,
        collate=collate_fn if callable(collate_fn) else None, framework=framework, cpus=cpus)
    return shown(analyse(run_inspection(settings)), NotebookInspection)


def run(script: str, args: Iterable[str] = (), *, module: bool = False, max_steps: int | None = None,
        seconds: float | None = None, override: str | Mapping[str, Any] | None = None, replay: int | None = None,
        loader: str | None = None) -> RunReport:
    """Run a training script (or ``module`` with ``module=True``) watched, as ``dataprof run`` does; its
    RunReport with the verdict. The script runs in its own process, with its own output. ``override``: loader
    knobs to set where the loaders are built (``{"num_workers": 8}`` or ``"num_workers=8"``); ``replay``: replay
    each loader's first N batches in its place (data for free); ``loader``: change only the loader built at
    ``file:line``."""
    from dataprof.decide.run import judge
    from dataprof.errors import UsageError
    from dataprof.measure.watch.settings import WatchSettings
    from dataprof.measure.watch.watcher import watch
    from dataprof.results.knobs import KnobValues
    from dataprof.results.run import RunChanges
    from dataprof.results.text import parse_knobs

    try:
        knobs = parse_knobs(override, "--override") if isinstance(override, str) else KnobValues(override)
    except ValueError as error:  # a mapping naming no knob
        raise UsageError(f"--override: {error}") from None
    if override is not None and not knobs:
        raise UsageError("--override: give KNOB=VALUE pairs (e.g. num_workers=8,prefetch_factor=4)")
    if replay is not None and replay < 1:
        raise UsageError(f"--replay {replay}: replay at least one batch")
    changes = RunChanges(knobs, replay, loader) if knobs or replay or loader else None
    return judge(watch(WatchSettings(target=script, args=tuple(args), module=module, max_steps=max_steps,
                                     seconds=seconds, changes=changes)))


def tune(script: str, args: Iterable[str] = (), *, module: bool = False, budget_s: float = 300.0,
         trial_seconds: float | None = 10.0, trial_steps: int | None = None, loader: str | None = None,
         loader_sweep: bool = True, nproc_per_node: int = 1,
         progress: Callable[[str], None] | None = None, workdir: str | None = None,
         nodes: NodeJob | None = None, startup_timeout_s: float = 300.0, try_fork: bool = False) -> TuneReport:
    """Tune the loader inside the training itself: run the script, unchanged, once per config tried (each in a fresh
    process, its busiest loader's knobs set where it is built, or the loader at ``loader``), and once with that loader's
    first batches replayed (data for free), each ended after ``trial_steps`` batches or ``trial_seconds``; the
    :class:`~dataprof.results.tune.TuneReport` with the answer. After the first two (the script as it is, then the
    headspace), a run starts only when the runs so far say it ends within ``budget_s``; the first run may take
    ``startup_timeout_s`` to reach its training's first batch. A start method the script sets is kept, unless
    ``try_fork``. With
    ``loader_sweep``, when the loader is built by a function dataprof can call on its own, that function is swept alone
    (beside a dummy model stepping as the training does with data for free) and its pick is run in the training too.
    With ``nproc_per_node`` above 1, each run is that many ranks of one job on this machine (torchrun's environment
    set), every rank with the same knobs; a run's figure is its slowest rank's. The script runs several times: whatever
    it writes, it writes each time (each run's environment has ``DATAPROF_TRIAL=1``; with ``workdir``, each run runs
    in its own directory under it). With ``nodes`` (node 0's :class:`~dataprof.results.environment.NodeJob`), each
    run is the job over every node, started together, while every other node runs :func:`follow_tune`."""
    from dataprof.tuner import run_tune

    if nodes is not None and not nodes.leader:
        from dataprof.errors import UsageError

        raise UsageError(f"node {nodes.node_rank} follows node 0's tune: call dataprof.follow_tune there")
    return run_tune(script, tuple(args), module=module, budget_s=budget_s, trial_seconds=trial_seconds,
                    trial_steps=trial_steps, loader=loader, loader_sweep=loader_sweep, nproc_per_node=nproc_per_node,
                    progress=progress, sweep=sweep, workdir=workdir, nodes=nodes, startup_timeout_s=startup_timeout_s,
                    try_fork=try_fork)


def follow_tune(script: str, args: Iterable[str] = (), *, nodes: NodeJob, module: bool = False,
                nproc_per_node: int = 1, progress: Callable[[str], None] | None = None,
                workdir: str | None = None) -> int:
    """A node other than 0 of a tune across nodes: run this node's ``nproc_per_node`` ranks of each run node 0's
    :func:`tune` says (its knobs, its window), until it says the end; the number of runs made. Node 0 measures
    and reports."""
    from dataprof.tuner import follow_tune as follow

    return follow(script, tuple(args), module=module, nproc_per_node=nproc_per_node, nodes=nodes, progress=progress,
                  workdir=workdir)


def plan(report_or_path: Report | str | os.PathLike[str], *, cpus: float | None = None, ranks_per_node: int = 1,
         ram: int | str | None = None, shm: int | str | None = None, step_ms: float | None = None,
         batch_size: int | None = None, node_groups: Iterable[NodeGroup | str] = ()) -> Plan:
    """Predict, from a sweep (a Report or its saved --json document), the rate of each num_workers on a machine
    with ``cpus`` CPUs shared by ``ranks_per_node`` ranks, the config to use on each rank, and what feeding a
    ``step_ms`` step at ``batch_size`` takes (each left out: the sweep's own); ``ram``/``shm`` (bytes or
    ``"32GB"``), when given, are checked. With ``node_groups`` (each a
    :class:`~dataprof.results.plan.NodeGroup` or its ``--node`` text, ``"1:cpus=8"``), a plan per group of nodes
    that differ, each what its group gives and the rest as above: the first group's plan, the others' in its
    ``groups``. Measures nothing: the :class:`~dataprof.results.plan.Plan` ``dataprof plan`` renders
    (``.to_json()``)."""
    from pathlib import Path

    from dataprof.decide.plan import check_groups, machine_of, make_plan, make_plans
    from dataprof.decide.sweep import decide
    from dataprof.results.load import load_as
    from dataprof.results.text import parse_bytes, parse_node_group

    report = report_or_path if isinstance(report_or_path, Report) else load_as(Path(report_or_path), Report)
    sizes = {flag: parse_bytes(value, flag) if isinstance(value, str) else value
             for flag, value in (("--ram", ram), ("--shm", shm))}
    decided = decide(report)
    groups = [parse_node_group(group) if isinstance(group, str) else group for group in node_groups]
    if not groups:
        return make_plan(decided, machine_of(decided, cpus, ranks_per_node, sizes["--ram"], sizes["--shm"], step_ms,
                                             batch_size))
    check_groups(groups)
    return make_plans(decided, [machine_of(decided, cpus if g.cpus is None else g.cpus,
                                           ranks_per_node if g.ranks_per_node is None else g.ranks_per_node,
                                           sizes["--ram"] if g.ram_bytes is None else g.ram_bytes,
                                           sizes["--shm"] if g.shm_bytes is None else g.shm_bytes, step_ms,
                                           batch_size, g.nodes) for g in groups])


class Watch:
    """``with dataprof.watch() as w: train()``: every torch DataLoader iterated inside is timed (data wait,
    step, first batch per epoch) and this process's tree is sampled from a process outside it; ``w.report``
    (the RunReport ``dataprof run`` renders, with its verdict) is set when the block ends."""

    def __init__(self) -> None:
        self.report: RunReport | None = None
        """Set when the block ends, even when it raised."""

    def __enter__(self) -> Watch:
        from dataprof.measure.watch.inprocess import InProcessWatch

        self._watch = InProcessWatch().start()
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        from dataprof.decide.run import judge

        self.report = judge(self._watch.stop(exc))


def watch() -> Watch:
    """Watch the DataLoaders of the code in a ``with`` block: ``with dataprof.watch() as w: train()``."""
    return Watch()

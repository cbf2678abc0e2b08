"""``dataprof tune``'s loop: the user's training run, unchanged, once per config the decision asks for (each in a
fresh process, watched as ``dataprof run`` watches it), once with its first batches replayed (the headspace), and
the loader-only sweep whose pick the training tries too. Orchestration, as ``sweeper.py`` is for a sweep: which run
comes next, and the answer, are ``decide/tune.py``'s."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dataprof.errors import DataprofError
from dataprof.results.knobs import KnobValues
from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport, TuneTrial
from dataprof.results.vocabulary import Framework

if TYPE_CHECKING:
    from dataprof.measure.launch import Stop
    from dataprof.measure.watch.nodes import TuneNodes
    from dataprof.results.environment import NodeJob

ALWAYS_RUNS = 2
"""The runs of ``tune`` made whatever its budget: the script as it is and the headspace, without which there is no
data cost to report."""
LOADER_SWEEP_TRIAL_S = 2.0
"""The window of each trial of tune's loader-only sweep: it proposes, the training decides."""


Sweep = Callable[..., Report]
"""The Python API's ``dataprof.sweep``: the loader-only sweep is run through it, as a user would."""


def run_tune(script: str, args: tuple[str, ...], *, module: bool, budget_s: float, trial_seconds: float | None,
             trial_steps: int | None, loader: str | None, loader_sweep: bool, nproc_per_node: int,
             progress: Callable[[str], None] | None, sweep: Sweep, workdir: str | None = None,
             nodes: NodeJob | None = None, startup_timeout_s: float = 300.0, try_fork: bool = False) -> TuneReport:
    """``dataprof.tune``'s work (its docstring says what it does); ``sweep`` runs the loader-only sweep. Ctrl-C
    (or SIGTERM) at any moment ends it with the runs measured so far (``complete`` false). With ``nodes`` (node
    0's), each run is the job over every node: node 0 says each run to the others (:func:`follow_tune`)."""
    from dataprof.decide.tune import decide_tune, next_run, runs_left

    started = time.monotonic()
    tuning = _Tuning(script=script, args=args, module=module, trial_seconds=trial_seconds, trial_steps=trial_steps,
                     site=loader, loader_sweep=loader_sweep and nproc_per_node == 1 and nodes is None,
                     nproc_per_node=nproc_per_node, progress=progress, sweep=sweep, started=started, budget_s=budget_s,
                     workdir=None if workdir is None else os.path.abspath(workdir), startup_s=startup_timeout_s,
                     try_fork=try_fork)
    tuning.report = _started((("-m",) if module else ()) + (script, *args), module, nproc_per_node, nodes)
    if nodes is not None:
        from dataprof.measure.watch.nodes import TuneNodes

        tuning.nodes = TuneNodes(nodes)
    if progress is not None:
        from dataprof.render.tune import side_effects_line

        progress(side_effects_line(workdir))
    try:
        while True:
            left = runs_left(tuning.report, tuning.elapsed(), budget_s)
            if len(tuning.report.trials) >= ALWAYS_RUNS and left < 1:
                break  # the next run would end past the budget
            step = next_run(tuning.report, left if len(tuning.report.trials) >= ALWAYS_RUNS else None)
            if step is None:
                break
            if not tuning.run(*step):
                return tuning.report
    except KeyboardInterrupt:  # between runs, or in the loader-only sweep: what was measured stands
        return decide_tune(dataclasses.replace(tuning.report, complete=False, wall_s=time.monotonic() - started))
    except DataprofError as exc:  # across nodes: a node that did not join a run, or died in it
        if tuning.nodes is None or not tuning.report.trials:
            raise
        return decide_tune(dataclasses.replace(tuning.report, complete=False, error=exc.message,
                                               wall_s=time.monotonic() - started))
    finally:
        if tuning.nodes is not None:
            tuning.nodes.end(len(tuning.report.trials) + 1)
    return tuning.report


def follow_tune(script: str, args: tuple[str, ...], *, module: bool, nproc_per_node: int, nodes: NodeJob,
                progress: Callable[[str], None] | None, workdir: str | None = None) -> int:
    """A node other than 0 of a tune across nodes: run this node's ranks of each run node 0 says, until it says
    the end; the runs made. Node 0 measures and reports; DataprofError when it goes silent."""
    from dataprof.distributed import watch_ranks
    from dataprof.measure.watch.nodes import HEARD_S, TuneNodes

    _started((("-m",) if module else ()) + (script, *args), module, nproc_per_node, nodes)
    told = TuneNodes(nodes)
    workdir = None if workdir is None else os.path.abspath(workdir)
    from dataprof.measure.launch import Stop

    number, wait_s = 1, nodes.join_s + HEARD_S
    while (heard := told.hear(number, wait_s)) is not None:
        settings, run_id = heard
        if progress is not None:
            progress(f"node {nodes.node_rank}: run {number} as node 0 says it ({run_id})")
        stop = Stop()
        try:
            with told.watched(number, stop):
                watch_ranks(dataclasses.replace(settings, target=_target(script, module, workdir), args=args,
                                                module=module, cwd=_directory(workdir, number)),
                            nproc_per_node, nodes, run_id, stop)
        except DataprofError as exc:
            told.leave()
            exc.message = f"node {nodes.node_rank}: {exc.message}"
            raise
        number, wait_s = number + 1, (settings.limit_s or nodes.join_s) + HEARD_S
    return number - 1


@dataclasses.dataclass(kw_only=True)
class _Tuning:
    """A tune under way: what it runs, and its report so far."""

    script: str
    args: tuple[str, ...]
    module: bool
    trial_seconds: float | None
    trial_steps: int | None
    site: str | None
    loader_sweep: bool
    nproc_per_node: int
    progress: Callable[[str], None] | None
    sweep: Sweep
    started: float
    budget_s: float
    workdir: str | None
    startup_s: float = 300.0
    """The first run's start-up allowance (``--startup-timeout``)."""
    try_fork: bool = False
    """Try ``fork`` in place of a start method the script sets (``--try-fork``)."""
    nodes: TuneNodes | None = None
    """Across nodes, on node 0: where it says each run to the other nodes."""
    report: TuneReport = dataclasses.field(default_factory=lambda: TuneReport("", (), None, (), 0.0))
    found: LoaderRun | None = None
    split: str | None = None
    """The split of the loader tuned, where its framework says (its validation loader may share its site)."""

    def run(self, knobs: KnobValues, role: str, node_knobs: dict[str, KnobValues] | None = None) -> bool:
        """One run of the training with ``knobs`` in ``role`` (across nodes, each node's own ``node_knobs`` on top),
        added to the report (decided again); False when it was interrupted (the report then says so)."""
        from dataprof.decide.tune import decide_tune, replay_batches, run_limits
        from dataprof.measure.watch.settings import WatchSettings
        from dataprof.render.tune import run_line
        from dataprof.results.run import RunChanges

        headspace = role == "headspace"
        kept = replay_batches(self.report, self.trial_seconds) if headspace else None
        node_knobs = node_knobs or {}

        def changes_of(node: int) -> RunChanges | None:
            mine = knobs | node_knobs.get(str(node), KnobValues())
            return RunChanges(mine, kept, self.site, split=self.split) if mine or headspace else None

        changes = changes_of(0)
        number = len(self.report.trials) + 1
        if self.progress is not None:
            self.progress(run_line(number, self.budget_s - self.elapsed(), knobs, role, kept, node_knobs))
        settings = WatchSettings(target=self.target(), args=self.args, module=self.module,
                                 max_steps=self.trial_steps, seconds=self.trial_seconds, seconds_from_first_batch=True,
                                 changes=changes, window_from_replay=headspace, cwd=self.directory(number),
                                 training=(self.site, self.split),
                                 env={"DATAPROF_TRIAL": "1", "DATAPROF_TRIAL_ROLE": role,
                                      "DATAPROF_TRIAL_INDEX": str(number)},
                                 interactive=False, stop_own_ranks=True, end_with_job=True,
                                 **run_limits(self.report, self.trial_seconds, self.startup_s))
        run_id = f"dataprof-tune-{uuid.uuid4()}"
        if self.nodes is not None:
            self.nodes.say(number, settings, run_id,
                           {node: changes_of(node) for node in range(1, self.nodes.job.nnodes)})
        if self.nodes is None:
            ran = _run(settings, self.nproc_per_node, knobs, role, self.site, self.split, None, run_id)
        else:
            from dataprof.measure.launch import Stop

            stop = Stop()
            with self.nodes.watched(number, stop):
                ran = _run(settings, self.nproc_per_node, knobs, role, self.site, self.split, self.nodes.job, run_id,
                           stop)
        if ran is None:  # Ctrl-C: the script got it too and ended; what was measured stands
            self.report = decide_tune(dataclasses.replace(self.report, complete=False, wall_s=self.elapsed()))
            return False
        run, trial = ran
        trial = dataclasses.replace(trial, node_knobs=node_knobs)
        self.report = decide_tune(dataclasses.replace(self.report, trials=(*self.report.trials, trial),
                                                      wall_s=self.elapsed()))
        if role == "headspace" and self.loader_sweep and self.found is not None and trial.ok \
                and self.report.loader_sweep is None:
            self.report = decide_tune(dataclasses.replace(
                loader_sweep_of_factory(self.report, self.found, trial, self.progress, self.sweep),
                wall_s=self.elapsed()))
            if not self.report.complete:
                return False
        if role == "current" and self.report.loader is None:
            self.report, self.found = _tuned(self.report, run, trial, self.script, self.site, self.try_fork)
            self.site, self.split = self.found.site, self.found.split
        return True

    def elapsed(self) -> float:
        """Seconds since the tune started."""
        return time.monotonic() - self.started

    def target(self) -> str:
        """The script as a run names it (:func:`_target`)."""
        return _target(self.script, self.module, self.workdir)

    def directory(self, number: int) -> str:
        """Where run ``number`` runs (:func:`_directory`)."""
        return _directory(self.workdir, number)


def _target(script: str, module: bool, workdir: str | None) -> str:
    """The script as a run names it: its absolute path when the runs run elsewhere (``--workdir``)."""
    return script if workdir is None or module else os.path.abspath(script)


def _directory(workdir: str | None, number: int) -> str:
    """Where run ``number`` runs: here, or its own directory under ``workdir``."""
    if workdir is None:
        return os.getcwd()
    path = os.path.join(workdir, f"run-{number}")
    os.makedirs(path, exist_ok=True)
    return path


def _started(command: tuple[str, ...], module: bool, nproc_per_node: int, nodes: NodeJob | None) -> TuneReport:
    """The tune's report before its first run, once the script is found and ``nproc_per_node`` can run here."""
    from dataprof.decide.tune.loader import ranks_notes
    from dataprof.distributed import rank_from_env
    from dataprof.errors import UsageError
    from dataprof.measure.watch.settings import WatchSettings, check_target
    from dataprof.version import __version__

    if nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node {nproc_per_node}: run at least one rank")
    if rank_from_env() is not None:
        raise UsageError("dataprof tune starts the training's ranks itself: run it outside torchrun, with "
                         "--nproc-per-node")
    check_target(WatchSettings(target=command[1] if module else command[0], module=module))
    if nodes is not None:
        nodes.check()
    nnodes = 1 if nodes is None else nodes.nnodes
    return TuneReport(__version__, command, None, (), 0.0, notes=ranks_notes(nproc_per_node, nnodes),
                      nproc_per_node=nproc_per_node, nnodes=nnodes)


def _run(settings: Any, nproc_per_node: int, knobs: KnobValues, role: str, site: str | None, split: str | None,
         nodes: NodeJob | None, run_id: str, stop: Stop | None = None) -> tuple[RunReport, TuneTrial] | None:
    """One run of the training (as ``nproc_per_node`` ranks when above 1): rank 0's report and the trial it
    makes; None when it was interrupted (Ctrl-C). ``stop`` ends the ranks with its reason."""
    from dataprof.decide.tune import trial_of, trial_of_ranks
    from dataprof.distributed import watch_ranks
    from dataprof.measure.watch.watcher import watch

    if nproc_per_node == 1 and nodes is None:
        run = watch(settings)
        return (run, trial_of(run, knobs, role, site, split)) if run.complete else None
    ranks = watch_ranks(settings, nproc_per_node, nodes, run_id, stop)
    if ranks is None or not all(r.complete for _, r in ranks):
        return None
    runs = [run for _, run in ranks]
    return runs[0], trial_of_ranks(runs, knobs, role, site, split, None if nodes is None else nproc_per_node,
                                   [host for host, _ in ranks])


def _tuned(report: TuneReport, run: RunReport, trial: TuneTrial, script: str, site: str | None,
           try_fork: bool = False) -> tuple[TuneReport, LoaderRun]:
    """After the first run of the script as it is: the report with the loader it tunes (the busiest, or the one
    at ``site``) and the other loaders named, and that loader; TargetError when there is none or the run failed. A
    start method the script chose is not tried otherwise, unless ``try_fork``."""
    from dataprof.decide.tune import tuned_loader
    from dataprof.decide.tune.loader import tuning
    from dataprof.errors import TargetError, UsageError

    if run.own_ranks is not None:
        raise UsageError(f"{script} starts ranks of its own ({run.own_ranks}), which would run unwatched with its "
                         "own knobs: make it train in this process, one rank (as under torchrun), and give "
                         "dataprof tune --nproc-per-node N")
    found = tuned_loader(run, site)
    if not trial.ok and (found is None or run.exit_code):  # it failed, before its first batch or after
        raise TargetError(f"{script}: the script as it is failed: {trial.error}")
    if found is None:
        raise TargetError(f"{script}: the script iterated no DataLoader" + (f" built at {site}" if site else "")
                          + " in its run: nothing to tune")
    if not trial.ok:
        raise TargetError(f"{script}: the script as it is failed: {trial.error}")
    start_methods: tuple[str, ...] = ()
    threads: str | None = None
    if found.framework == Framework.TORCH:
        import multiprocessing

        from dataprof.backends import get_backend
        from dataprof.backends.threads import thread_loader

        start_methods = tuple(multiprocessing.get_all_start_methods())
        threads = thread_loader(get_backend("torch").loader_arguments())
    return tuning(report, run, found, try_fork=try_fork, start_methods=start_methods, threads=threads), found


def loader_sweep_of_factory(report: TuneReport, found: LoaderRun, headspace: TuneTrial,
                            progress: Callable[[str], None] | None, sweep: Sweep) -> TuneReport:
    """``report`` with the loader-only sweep of the tuned loader's factory (a short adaptive sweep at the
    training's free-data step), or with a note saying why there is none (once: each headspace run asks)."""
    from dataprof.decide.tune import loader_sweep_of, sweep_target
    from dataprof.errors import DataprofError
    from dataprof.results.tune import LoaderSweep
    from dataprof.sweeper import SweepInterrupted

    target = sweep_target(found)
    if isinstance(target, str):  # said once, whichever headspace run asks
        note = f"no loader-only sweep to compare: {target}"
        return report if note in report.notes else dataclasses.replace(report, notes=(*report.notes, note))
    name, kwargs, split = target
    step = headspace.step_ms.p50 if headspace.step_ms else 0.0
    swept = LoaderSweep(name, kwargs, step)
    if progress is not None:
        progress(f"the loader alone: sweeping {name} beside a dummy model stepping {step:.1f} ms")
    try:
        result = sweep(name, args=kwargs, split=split, step_ms=step, trial_seconds=LOADER_SWEEP_TRIAL_S,
                       rules_of_thumb=False, cache="warm", progress=progress is not None)
    except DataprofError as error:
        return dataclasses.replace(report, loader_sweep=dataclasses.replace(swept, error=str(error)))
    except SweepInterrupted:  # Ctrl-C before its first trial ended: it ends the tune too
        result = None
    if result is None or not result.complete:
        return dataclasses.replace(report, complete=False,
                                   loader_sweep=dataclasses.replace(swept, error="interrupted"))
    assert report.loader is not None
    return dataclasses.replace(report, loader_sweep=loader_sweep_of(swept, result, report.loader))

"""Plan for another machine from a sweep's pipeline model: the rate of each worker count there, the config to
use on each rank, what feeding a model step takes, and where the plan leaves what was measured. Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from dataprof.decide.budgets import HEADROOM
from dataprof.decide.diagnose.facts import batch_size, ok_trials
from dataprof.decide.model import CONTENDED, predict
from dataprof.decide.recommend import MAX_TRADE, recommend
from dataprof.decide.thresholds import Thresholds
from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.pipeline import PipelineModel
from dataprof.results.plan import Feeding, Measured, NodeGroup, Plan, PlanPoint, TargetMachine
from dataprof.results.sweep import Report
from dataprof.version import __version__

NOT_ENOUGH = ("a plan fits its model to at least two completed configs, one of them with workers whose CPU was "
              "read (older documents lack the main process's CPU): sweep again with "
              "num_workers=0 and two worker counts (dataprof sweep TARGET --workers 0,2,4)")
"""Why a sweep gives no plan."""

MOST_WORKERS = 1024
"""The most workers a plan weighs."""


def machine_of(report: Report, cpus: float | None = None, ranks_per_node: int = 1, ram_bytes: int | None = None,
               shm_bytes: int | None = None, step_ms: float | None = None,
               batch: int | None = None, nodes: tuple[int, ...] = ()) -> TargetMachine:
    """The machine a plan is for: what is given, the sweep's for the rest (its CPUs for each rank, its step and
    batch size); RAM and /dev/shm not given are not checked (another machine's are unknown)."""
    if ranks_per_node <= 0:
        raise UsageError(f"--ranks-per-node {ranks_per_node}: must be above 0")
    machine = TargetMachine(
        cpus=report.environment.usable_cpus * ranks_per_node if cpus is None else cpus,
        ranks_per_node=ranks_per_node, ram_bytes=ram_bytes, shm_bytes=shm_bytes,
        step_ms=float(report.settings.step_ms) if step_ms is None else step_ms,
        batch_size=batch_size(report) if batch is None else batch, nodes=nodes)
    for value, flag in ((machine.cpus, "--cpus"), (machine.batch_size, "--batch-size"),
                        (1 if ram_bytes is None else ram_bytes, "--ram"),
                        (1 if shm_bytes is None else shm_bytes, "--shm")):
        if not math.isfinite(value):
            raise UsageError(f"{flag} {value:g}: must be a finite number")
        if value <= 0:
            raise UsageError(f"{flag} {value:g}: must be above 0")
    if not math.isfinite(machine.step_ms):
        raise UsageError(f"--step-ms {machine.step_ms:g}: must be a finite number")
    if machine.step_ms < 0:
        raise UsageError(f"--step-ms {machine.step_ms:g}: must be 0 or more")
    return machine


def make_plan(report: Report, machine: TargetMachine) -> Plan:
    """The plan for ``machine`` from ``report`` (decided: its model fitted); UsageError when it has none."""
    if report.model is None:
        completed = len(ok_trials(report))
        raise UsageError(f"{report.target}: {completed} of {len(report.trials)} trials completed; {NOT_ENOUGH}")
    measured = Measured(cpus=report.model.cpus, cpu_reason=report.environment.cpu_reason,
                        trials=len(ok_trials(report)), workers=tuple(report.model.measured_workers),
                        step_ms=float(report.settings.step_ms), batch_size=report.model.batch_size,
                        shuffle=report.settings.shuffle, collate_fn=report.settings.collate_fn)
    knobs, why = planned_knobs(report)
    return plan_for(report.target, measured, machine, report.model, knobs, why)


def check_groups(groups: Sequence[NodeGroup]) -> None:
    """A UsageError for a node in two groups (``--node``)."""
    seen: dict[int, int] = {}
    for index, group in enumerate(groups):
        for node in group.nodes:
            if node in seen:
                raise UsageError(f"--node: node {node} is in two groups (the {_nth(seen[node])} and the "
                                 f"{_nth(index)}); give each node once")
            seen[node] = index


def _nth(index: int) -> str:
    return {0: "first", 1: "second", 2: "third"}.get(index, f"{index + 1}th")


def make_plans(report: Report, machines: Sequence[TargetMachine]) -> Plan:
    """The plan for each machine (a node group each), the first with the others' as its ``groups``."""
    plans = [make_plan(report, machine) for machine in machines]
    return dataclasses.replace(plans[0], groups=tuple(plans[1:]))


def planned_knobs(report: Report) -> tuple[LoaderConfig, str | None]:
    """The config whose num_workers a plan changes: the sweep's recommendation, or, when threads won, its best
    worker-process config, with why. The model is of worker processes (each receives and unpickles batches,
    holds its own copy of the main process's pages, passes batches through /dev/shm): it does not predict
    threads, and a plan never mixes the two."""
    framework = report.environment.framework
    rec = report.recommendation
    if rec is None or not rec.config.threads:
        return (rec.config if rec else baseline(framework)), None
    processes = recommend([t for t in report.trials if not t.config.threads])
    knobs = processes.config if processes is not None else baseline(framework)
    return knobs, (f"the sweep recommended threads ({rec.config.label()}), which the model does not predict (it "
                   "is of worker processes: each receives and unpickles batches, holds a copy of the main "
                   "process's pages and passes batches through /dev/shm); this plans worker processes from "
                   f"the sweep's best process config ({knobs.label()}). Measure threads on that machine "
                   "with --worker-kind process,thread")


def plan_again(plan: Plan) -> Plan:
    """``plan`` made again from the model it holds, by the current rules (``dataprof diagnose``)."""
    return plan_for(plan.target, plan.measured, plan.machine, plan.model, plan.knobs, plan.knobs_reason)


def plan_for(target: str, measured: Measured, machine: TargetMachine, model: PipelineModel,
             knobs: LoaderConfig, knobs_reason: str | None = None) -> Plan:
    """The plan for ``machine`` from ``model``; ``knobs``: the config whose num_workers it changes (a worker
    process config), ``knobs_reason``: why it is not the sweep's pick."""
    feed = feeding(model, machine)
    enough = _enough(model, machine.cpus_per_rank, machine.step_ms / 1000, machine.batch_size)
    top = max(8, 4 * math.ceil(machine.cpus_per_rank), *model.measured_workers, enough)
    recommended = _recommended(tuple(_point(model, machine, knobs, feed, w) for w in range(top + 1)))
    powers = (2 ** k for k in range(MOST_WORKERS.bit_length()) if 2 ** k <= top)
    shown = {0, *powers, *model.measured_workers, recommended.num_workers}
    if feed is not None and feed.workers is not None:
        shown.add(feed.workers)
    curve = tuple(_point(model, machine, knobs, feed, workers) for workers in sorted(shown))
    notes = ([knobs_reason] if knobs_reason else []) + list(model.notes)
    if not recommended.fits:
        notes.append("no worker count fits the RAM and /dev/shm given: the one shown needs more")
    return Plan(tool_version=__version__, target=target, measured=measured, machine=machine, model=model,
                knobs=knobs, curve=curve, recommended=recommended, feeding=feed,
                extrapolations=_extrapolations(model, machine, recommended), notes=tuple(notes),
                knobs_reason=knobs_reason)


def _enough(model: PipelineModel, cpus: float, step_s: float, batch: int) -> int:
    """Workers past which more cannot help on ``cpus`` CPUs: those that deliver what the CPUs, the main process
    or the step allow (a latency-bound pipeline's can be many per CPU), with a quarter more to show the curve
    flatten."""
    per_sample = sum(e.value for e in (model.worker_cpu_s_per_sample, model.wait_s_per_sample) if e is not None)
    ceiling = predict(model, MOST_WORKERS, cpus, step_s, batch)
    if per_sample <= 0 or math.isnan(ceiling.samples_per_s):
        return 0
    return min(MOST_WORKERS, math.ceil(1.25 * ceiling.samples_per_s * per_sample))


def feeding(model: PipelineModel, machine: TargetMachine, th: Thresholds | None = None) -> Feeding | None:
    """What feeding ``machine``'s step takes on a rank: the loop may wait at most ``model_bound_wait`` (5%) of
    each iteration, the main process's own receiving included; None without a step."""
    if not machine.step_ms:
        return None
    th = th or Thresholds()
    batch, scale = machine.batch_size, machine.batch_size / model.batch_size
    step_s = machine.step_ms / 1000
    consumer = step_s + model.copy_s_per_batch * scale
    longest = consumer / (1 - th.model_bound_wait)
    main = (model.main_s_per_batch.value if model.main_s_per_batch else 0.0) * scale
    have = machine.cpus_per_rank
    work = model.worker_cpu_s_per_sample.value if model.worker_cpu_s_per_sample else 0.0
    wait = model.wait_s_per_sample.value if model.wait_s_per_sample else 0.0
    main_cpu = (model.main_cpu_s_per_batch.value if model.main_cpu_s_per_batch else 0.0) * scale

    def need(rate: float) -> tuple[float, int]:
        """The fewest CPUs per rank on which the model delivers ``rate`` samples/s with no more workers than a
        plan weighs there, and the fewest workers that do on them."""
        def reaches(cpus: float, workers: int | None = None) -> bool:
            workers = _enough(model, cpus, step_s, batch) if workers is None else workers
            return _keeps_up(predict(model, workers, cpus, step_s, batch).samples_per_s, rate)

        low = rate * (work + main_cpu / batch) / model.cpu_share  # what the samples cost: no fewer CPUs do it
        high = max(low, 1e-3)
        for _ in range(20):
            if reaches(high):
                break
            high *= 2
        else:  # more workers than a plan weighs: the samples' cost, and the workers that take at that rate
            return low, max(1, math.ceil(rate * (work + wait)))
        if low <= 0 or reaches(low):
            cpus = low
        else:
            for _ in range(40):
                middle = (low + high) / 2
                low, high = (low, middle) if reaches(middle) else (middle, high)
            cpus = high
        few, many = 0, max(1, _enough(model, cpus, step_s, batch))
        while many - few > 1:  # the rate grows with the workers: halve the bracket
            middle = (few + many) // 2
            few, many = (few, middle) if reaches(cpus, middle) else (middle, many)
        return cpus, many

    if main + consumer > longest:
        cpus, workers = need(batch / (main + consumer))
        return Feeding(machine.step_ms, batch, batch / longest, None, None, have, reason=(
            f"receiving each batch of {batch} takes the main process {1000 * main:.1f} ms, "
            f"{main / (main + consumer):.0%} of each iteration, whatever the CPUs; {cpus:.1f} CPUs per rank "
            f"({workers} workers) reach that ceiling (return fewer, larger tensors per sample, or take larger "
            "batches)"))
    serial = model.serial_s_per_batch
    if serial is not None and serial.value * scale + (0.0 if model.serial_overlaps_step else consumer) <= longest:
        return Feeding(machine.step_ms, batch, batch / longest, 1.0, 0, have)  # the main process alone keeps up
    cpus, workers = need(batch / longest)
    return Feeding(machine.step_ms, batch, batch / longest, cpus, workers, have)


def _keeps_up(rate: float, needed: float) -> bool:
    """``rate`` delivers ``needed``, to within rounding."""
    return rate >= needed * (1 - 1e-9)


def _point(model: PipelineModel, machine: TargetMachine, knobs: LoaderConfig, feed: Feeding | None,
           workers: int) -> PlanPoint:
    """One worker count on ``machine``: its rate, and what the node's ranks need for it."""
    prediction = predict(model, workers, machine.cpus_per_rank, machine.step_ms / 1000, machine.batch_size)
    ranks, scale = machine.ranks_per_node, machine.batch_size / model.batch_size
    memory = None if model.memory_base_bytes is None or model.memory_per_worker_bytes is None else \
        ranks * (model.memory_base_bytes + model.memory_per_worker_bytes * workers)
    shm = None
    if model.shm_bytes_per_batch is not None:
        shared = workers > 0 and knobs.use_shared_memory is not False
        shm = ranks * workers * knobs.prefetch * model.shm_bytes_per_batch * scale if shared else 0.0
    fits = (memory is None or machine.ram_bytes is None or memory <= HEADROOM * machine.ram_bytes) and \
        (shm is None or machine.shm_bytes is None or shm <= HEADROOM * machine.shm_bytes)
    feeds = None if feed is None else feed.cpus_per_rank is not None and \
        _keeps_up(prediction.samples_per_s, feed.samples_per_s)
    return PlanPoint(workers, prediction.samples_per_s, prediction.low, prediction.high, prediction.limit,
                     memory, shm, fits, feeds)


def _recommended(curve: tuple[PlanPoint, ...]) -> PlanPoint:
    """Of every worker count weighed: the fewest that feed the step; without a step or any that does, the
    fewest within 5% of the fastest; of the counts that fit (of all, when none does)."""
    fitting = [p for p in curve if p.fits and not math.isnan(p.samples_per_s)] or \
        [p for p in curve if not math.isnan(p.samples_per_s)]
    keeping_up = [p for p in fitting if p.feeds_step]
    if keeping_up:
        return keeping_up[0]
    best = max(p.samples_per_s for p in fitting)
    return next(p for p in fitting if p.samples_per_s >= (1 - MAX_TRADE) * best)


def _extrapolations(model: PipelineModel, machine: TargetMachine, recommended: PlanPoint) -> tuple[str, ...]:
    """Where the plan leaves what the sweep measured."""
    found = []
    cpus = machine.cpus_per_rank
    if not math.isclose(cpus, model.cpus, rel_tol=0.01):
        more = "more" if cpus > model.cpus else "fewer"
        found.append(f"{cpus:g} CPUs per rank, {more} than the {model.cpus:g} the sweep's trials had: a sample is "
                     "taken to cost the same CPU time there")
    if recommended.num_workers not in model.measured_workers:
        top = max(model.measured_workers)
        where = "more than the sweep measured" if recommended.num_workers > top else "a count the sweep skipped"
        found.append(f"w{recommended.num_workers}, {where} (it measured "
                     f"{', '.join(f'w{w}' for w in model.measured_workers)})")
    if recommended.limit == "cpus" and model.cpus_used is not None and model.cpus_used < CONTENDED * model.cpus:
        found.append(f"w{recommended.num_workers} is held back by the CPUs, a limit the sweep never reached (its "
                     f"trials used at most {model.cpus_used:.1f} of {model.cpus:g}): a sample's CPU was read on "
                     "idler CPUs, and a pipeline that waits often costs less CPU on busy ones, so more workers "
                     "than planned may go faster (measure there, or sweep with more workers)")
    if machine.batch_size != model.batch_size:
        found.append(f"batch size {machine.batch_size}, not the {model.batch_size} the sweep measured: its per-batch "
                     f"costs and /dev/shm are scaled by {machine.batch_size / model.batch_size:g}, its memory is "
                     "the sweep's")
    return tuple(found)

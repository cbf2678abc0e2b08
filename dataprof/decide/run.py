"""``dataprof run``'s decisions: does the training wait for data, how much, why, and what to run next. Pure.

The bands are the ones users know (TensorFlow's input-pipeline analyzer draws
the same lines): under 5% of the step waiting for data is fine, 5–20% is
moderate, from 20% the training is input-bound. Why it waits comes from the
same facts as a sweep's diagnosis: workers saturating the usable CPUs, the
main process saturated, no workers at all, or none of these (waiting on
something other than CPU).
"""

from __future__ import annotations

import dataclasses
import shlex
import statistics

from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.registry import record_of
from dataprof.results.run import LoaderRun, RankCause, RankRun, RunReport
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import FindingId, Severity, SlowRankCause, WorkerKind


def judge(report: RunReport, thresholds: Thresholds | None = None) -> RunReport:
    """``report`` with its verdict on the busiest loader and the ``dataprof sweep`` to run next."""
    th = thresholds or Thresholds()
    if not report.loaders:
        return dataclasses.replace(report, verdict=Finding(
            id=FindingId.NO_LOADER, severity=Severity.INFO,
            evidence="the script iterated no torch DataLoader while watched",
            recommendation="Run the script's training part (dataprof watches torch.utils.data.DataLoader "
                           "iterators, subclasses included)."), next_command=None)
    loader = report.loaders[0]
    return dataclasses.replace(report, verdict=_verdict(report, loader, th), next_command=next_command(report, loader))


def band(share: float, th: Thresholds) -> str:
    """``fine`` (< 5%), ``moderate`` (5–20%) or ``input-bound`` (≥ 20%) for a data-wait share."""
    if share < th.model_bound_wait:
        return "fine"
    return "moderate" if share < th.critical_wait else "input-bound"


def _verdict(report: RunReport, loader: LoaderRun, th: Thresholds) -> Finding:
    share = loader.data_wait_fraction
    if share is None or loader.step_ms is None:
        return Finding(id=FindingId.TOO_SHORT, severity=Severity.INFO,
                       evidence=f"{loader.site}: {loader.batches} batches, too few past each epoch's warm-up",
                       recommendation="Watch longer (more steps) to measure the steady state.")
    step = loader.step_ms.p50
    wait = loader.wait_ms.p50 if loader.wait_ms else 0.0
    numbers = (f"{loader.site} ({loader.dataset}{f', batch {loader.batch_size}' if loader.batch_size else ''}, "
               f"num_workers={loader.num_workers}): waiting for data {share:.0%} of each iteration (next() p50 "
               f"{wait:.1f} ms, step p50 {step:.1f} ms, {loader.samples_per_s or 0:,.0f} samples/s)")
    level = band(share, th)
    starts = _epoch_starts(loader, numbers, share, th)
    if starts is not None:
        return starts
    if level == "fine":
        busy = report.resources.cpu_percent_system
        if busy is not None and busy >= 100 * th.machine_saturated:
            return Finding(id=FindingId.MODEL_BOUND, severity=Severity.INFO,
                           evidence=f"{numbers}; the machine's CPUs were {busy:.0f}% busy (step p95 "
                                    f"{loader.step_ms.p95:.1f} ms)",
                           recommendation="The loader is not your bottleneck, but its workers share the CPUs with "
                                          "the step: on a CPU-only machine loading slows the step itself.")
        return Finding(id=FindingId.MODEL_BOUND, severity=Severity.INFO, evidence=numbers,
                       recommendation="The loader is not your bottleneck: the step itself sets the pace.")
    severity = Severity.WARNING if level == "moderate" else Severity.CRITICAL
    res, usable = report.resources, report.environment.usable_cpus
    workers = loader.num_workers or 0
    if workers and res.workers_cpu_percent is not None and res.workers_cpu_percent >= th.cpu_saturated * usable * 100:
        return Finding(id=FindingId.CPU_BOUND, severity=severity,
                       evidence=f"{numbers}; the workers use {res.workers_cpu_percent / 100:.1f} of {usable} CPUs",
                       recommendation="The samples' CPU cost is the limit: make each sample cheaper (decode less, "
                                      "cache, move augmentation to the GPU) or run on more CPUs.")
    if res.cpu_percent_system is not None and res.cpu_percent_system >= 100 * th.machine_saturated:
        return Finding(id=FindingId.CPU_BOUND, severity=severity,
                       evidence=f"{numbers}; the machine's CPUs were {res.cpu_percent_system:.0f}% busy (the training "
                                f"process {(res.main_cpu_percent or 0) / 100:.1f} cores, its workers "
                                f"{(res.workers_cpu_percent or 0) / 100:.1f})",
                       recommendation="Loading and the step compete for the CPUs: make samples cheaper (decode less, "
                                      "cache), or give the training more CPUs; on a GPU the step leaves them free.")
    if res.main_cpu_percent is not None and res.main_cpu_percent >= 100 * th.main_saturated and workers:
        return Finding(id=FindingId.MAIN_PROCESS_BOUND, severity=severity,
                       evidence=f"{numbers}; the training process uses {res.main_cpu_percent / 100:.1f} cores",
                       recommendation="The main process is saturated (receiving batches, the step's own CPU work): "
                                      "return fewer, larger tensors per batch, or take CPU work out of the step.")
    if workers == 0:
        return Finding(id=FindingId.MAIN_PROCESS_LOADING, severity=severity, evidence=f"{numbers}; no worker processes",
                       recommendation="Load in worker processes: sweep num_workers with the command below.")
    return Finding(id=FindingId.IO_BOUND, severity=severity,
                   evidence=f"{numbers}; the CPUs are not saturated"
                            + ("" if res.cpu_percent is None else f" (the tree uses {res.cpu_percent / 100:.1f} "
                                                                  f"of {usable})"),
                   recommendation="Samples wait on something other than CPU (storage, network, locks): more "
                                  "workers or a larger prefetch_factor hide it; the sweep below measures how many.")


def _epoch_starts(loader: LoaderRun, numbers: str, share: float, th: Thresholds) -> Finding | None:
    """The epochs' starts as the verdict, where those after the first (:func:`restart_share`) take
    ``critical_wait`` of the loader's time or more, and more than its steady ``share`` waits; None otherwise."""
    restarts = restart_share(loader)
    if restarts is None or restarts < th.critical_wait or restarts <= share:
        return None
    return Finding(id=FindingId.EPOCH_START, severity=Severity.WARNING,
                   evidence=f"{numbers} in the steady state, but each epoch's start after the first (first batch "
                            f"{', '.join(f'{s:.2f}' for s in loader.first_batch_s[1:4])} s, then the prefetch) took "
                            f"{restarts:.0%} of the loader's whole time over {loader.epochs} epochs of "
                            f"{loader.batches // max(1, loader.epochs)} batches",
                   recommendation="The workers persist already: what each epoch's iterator does as it starts (a "
                                  "sampler, an IterableDataset's __iter__, the prefetch refilled) sets the pace; run "
                                  "longer epochs (fewer, larger passes)." if loader.persistent_workers else
                                  "Epochs are short next to the workers' start: keep the workers "
                                  "(persistent_workers=True), or run longer epochs (fewer, larger passes).")


def restart_share(loader: LoaderRun) -> float | None:
    """The share of the loader's whole time its epochs after the first spent waiting at their starts: the waits at
    every epoch's start (``warmup_wait_fraction``: the first batch, the prefetch after it) in the proportion of
    the later epochs' first batches; the first epoch's start is the training's start-up, not a cost of short
    epochs. None with one epoch."""
    starts = loader.first_batch_s
    if loader.warmup_wait_fraction is None or len(starts) < 2 or not sum(starts):
        return None
    return loader.warmup_wait_fraction * sum(starts[1:]) / sum(starts)


def next_command(report: RunReport, loader: LoaderRun) -> str:
    """The sweep that comes next, with the measured step (``--step-ms``) for the guess. Its TARGET is the
    function (or DataModule) that built the loader, when the script's own call can be repeated (the loader
    then brings its batch size, sampler and settings); else the dataset, named by its file when that lies
    under the directory the script ran in (a class in the script itself included), else by its module; a
    library's dataset class (a Hugging Face ``datasets.Dataset``) only the script's data makes, so the command
    leaves ``MODULE:FUNCTION`` for a function of the user's that returns it, and says so; so does a loader with no
    batch size (its batch sampler or its dataset makes the batches), for a function that returns the loader. A
    loader over threads is swept over both kinds of workers."""
    step = f" --step-ms {loader.step_ms.p50:.1f}" if loader.step_ms else ""
    if loader.factory is not None and loader.factory_blocked is None:
        args = "".join(f" --arg {shlex.quote(item)}" for item in loader.factory_args or ())
        split = f" --split {loader.factory_split}" if loader.factory_split not in (None, "train") else ""
        return f"dataprof sweep {loader.factory}{args}{split}{step}"
    kinds = " --worker-kind process,thread" if loader.worker_kind == WorkerKind.THREAD else ""
    if loader.batch_size is None:  # its batch sampler or its dataset makes the batches: the loader must come along
        return (f"dataprof sweep MODULE:FUNCTION{step}{kinds}  # MODULE:FUNCTION: a function of yours that returns "
                f"the {loader.loader_class} built at {loader.site} (its batches come from its batch sampler or its "
                f"dataset, not a batch size: a sweep of {loader.dataset} alone would batch them again)")
    path = loader.dataset_file
    if loader.dataset_library:  # built with the script's arguments: the script's own function must build it
        target = "MODULE:FUNCTION"
    elif path is not None and not path.startswith("/") or loader.dataset_module in (None, "__main__"):
        target = f"{path or '?'}:{loader.dataset}"
    else:
        target = f"{loader.dataset_module}:{loader.dataset}"
    command = f"dataprof sweep {target} --batch-size {loader.batch_size}{step}{kinds}{_current(loader)}"
    return command + (f"  # MODULE:FUNCTION: a function of yours that returns the {loader.dataset_module}."
                      f"{loader.dataset} (a library's class, built from the script's data)"
                      if loader.dataset_library else "")


def _current(loader: LoaderRun) -> str:
    """``--current`` with the loader's settings, so the sweep of its dataset measures them first, against its pick:
    its workers (``worker_kind=thread`` where they are threads), and each knob the script set away from the
    DataLoader's default that its workers take (the start method where the script chose it). None for no workers
    and no knob set (the sweep's baseline)."""
    if loader.num_workers is None:
        return ""
    threads = loader.worker_kind == WorkerKind.THREAD and loader.num_workers > 0
    values: dict[str, object] = {"num_workers": loader.num_workers}
    for name, value in loader.knobs().items():
        record = record_of(name) if name != "num_workers" else None
        if record is not None and record.keyword and value is not None and value != record.loader_default and \
                (record.threads or not threads) and (name != "multiprocessing_context" or loader.start_method_chosen):
            values[name] = value
    if threads:
        values["worker_kind"] = WorkerKind.THREAD.value
    if values == {"num_workers": 0}:
        return ""  # the sweep's baseline
    return " --current " + ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())


def rank_cause(report: RunReport, thresholds: Thresholds | None = None) -> RunReport:
    """``report`` (rank 0's, with every rank's figures) with why its slowest rank waits and what to change on that
    rank's node (``rank_cause``): synchronous training steps at the pace of the rank that waits most for data, so one
    node short of CPUs, or with slower storage, slows every node. None when no rank waits much more than the
    others."""
    th = thresholds or Thresholds()
    ranks = [r for r in report.ranks if r.data_wait_fraction is not None]
    if len(ranks) < 2:
        return report
    slow = max(ranks, key=lambda r: r.data_wait_fraction or 0.0)
    others = [r for r in ranks if r is not slow]
    wait, typical = slow.data_wait_fraction or 0.0, statistics.median(r.data_wait_fraction or 0.0 for r in others)
    if wait < th.model_bound_wait or wait - typical < th.model_bound_wait:
        return dataclasses.replace(report, rank_cause=None)
    node = "its node" if slow.node is None else f"node {slow.node}"
    evidence = (f"rank {slow.rank} on {node} ({slow.host}) waits {wait:.0%} of each iteration for data, the other "
                f"ranks {typical:.0%} (median); its step p50 {_num(slow.step_ms_p50)} ms, num_workers="
                f"{_num(slow.num_workers)}, its tree {_cores(slow.cpu_percent)} of {_num(_capacity(slow))} CPUs"
                f"{_node_load(slow)}, peak memory {fmt_bytes(slow.peak_memory_bytes)} (PSS)")
    cause, why, fix, workers = _why(slow, others, node, th)
    finding = Finding(id=FindingId.RANK_IMBALANCE,
                      severity=Severity.CRITICAL if wait >= th.critical_wait else Severity.WARNING,
                      evidence=f"{evidence}; {why}", recommendation=f"{fix} Every step waits for this rank.")
    return dataclasses.replace(report, rank_cause=RankCause(finding, slow.rank, slow.node, cause, workers))


def _why(slow: RankRun, others: list[RankRun], node: str,
         th: Thresholds) -> tuple[SlowRankCause, str, str, int | None]:
    """Why ``slow`` waits, from its figures against the others': the cause, its evidence, the change on its node
    and the ``num_workers`` to set there (None when the change is not a number of workers)."""
    ranks = max(1, slow.ranks_on_node or 1)
    cpus = slow.node_cpus if slow.node_cpu_quota is None or slow.node_cpus is None else \
        min(float(slow.node_cpus), slow.node_cpu_quota)
    share = max(1, int((cpus or 1) // ranks))
    workers = slow.num_workers or 0
    more = [_capacity(r) for r in others if cpus is not None and (_capacity(r) or 0) > cpus]
    than_others = f" (the others have {max(c or 0 for c in more):g})" if more else ""
    own, foreign = slow.cpu_percent, slow.foreign_cpu_percent or 0.0
    starved = cpus is not None and own is not None and (own >= th.cpu_saturated * 100 * cpus / ranks
                                                        or own + foreign >= th.cpu_saturated * 100 * cpus)
    if starved and workers > share:
        return (SlowRankCause.OVERSUBSCRIBED,
                f"{node} has {cpus:g} CPUs{than_others} for {ranks} rank(s) × {workers} workers, and they are busy "
                f"(this rank's tree {(own or 0) / 100:.1f} cores, other processes {foreign / 100:.1f}): the workers "
                "fight each other and the step for CPUs",
                f"Give {node} more CPUs or fewer ranks: its loading needs them. num_workers={share} there (its CPUs "
                "over its ranks) stops the workers fighting over the CPUs it has, but loads no faster.", share)
    if starved and foreign >= 0.25 * 100 * (cpus or 1):
        return (SlowRankCause.CPUS_TAKEN,
                f"other processes took {foreign / 100:.1f} of the {cpus:g} CPUs {node} gives the training",
                f"Free {node}'s CPUs (what else runs there: other jobs, other ranks' workers), or give it more.", None)
    if starved:
        return (SlowRankCause.CPUS_SHORT,
                f"its loading needs more than the {cpus:g} CPUs {node} gives it{than_others}",
                f"Give {node} more CPUs (or fewer ranks), or make each sample cheaper to load.", None)
    theirs = [r.storage_read_bytes_per_s for r in others if r.storage_read_bytes_per_s is not None]
    reads = slow.storage_read_bytes_per_s
    if reads is not None and reads >= 1e6 and reads >= 2 * max(statistics.median(theirs) if theirs else 0.0, 1.0):
        return (SlowRankCause.STORAGE,
                f"it reads {fmt_bytes(reads)}/s from storage, the others {fmt_bytes(statistics.median(theirs))}/s"
                if theirs else f"it reads {fmt_bytes(reads)}/s from storage",
                f"Its data comes from storage where the others' is cached: warm the page cache on {node} or stage "
                "the data on its local disk.", None)
    if workers == 0:
        return (SlowRankCause.NO_WORKERS, f"it loads in the training process, with {_num(cpus)} CPUs on {node}",
                f"On {node}, set num_workers={share}.", share)
    return (SlowRankCause.UNKNOWN,
            "its CPUs are not saturated and it reads no more from storage than the others: its samples cost more or "
            "arrive slower (a shard of costlier samples, its network)",
            f"Look at what differs on {node} (dataprof inspect there); more workers there hide a wait: "
            f"num_workers={2 * workers} on {node}.", 2 * workers)


def _capacity(rank: RankRun) -> float | None:
    """The CPUs a rank's node gives the training: its usable CPUs, or its cgroup quota where that is less."""
    if rank.node_cpus is None or rank.node_cpu_quota is None:
        return rank.node_cpus
    return min(float(rank.node_cpus), rank.node_cpu_quota)


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}" if isinstance(value, int) else f"{value:.1f}"


def _cores(cpu_percent: float | None) -> str:
    return "? cores" if cpu_percent is None else f"used {cpu_percent / 100:.1f} cores"


def _node_load(rank: RankRun) -> str:
    if rank.node_busy_percent is None:
        return ""
    return f" (the node's {rank.node_cpu_count or '?'} CPUs {rank.node_busy_percent:.0f}% busy)"

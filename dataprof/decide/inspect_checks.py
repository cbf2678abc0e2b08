"""The checks of ``dataprof inspect`` (pure): each reads an Inspection's figures and returns a Finding (with the
numbers behind it and what to change) or None."""

from __future__ import annotations

from dataprof.decide.budgets import HEADROOM
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.inspect import Inspection, SlowSample
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import FindingId, Severity, StartMethod


def ceiling_text(rate: float | None, usable: int) -> str:
    """``1,234 samples/s on 2 CPUs``, or ``unknown``."""
    return f"{rate:,.0f} samples/s on {usable} CPU{'s' if usable != 1 else ''}" if rate else "unknown"


def check_errors(ins: Inspection, th: Thresholds) -> Finding | None:
    """Samples that raised: critical, since one raising sample stops a whole DataLoader epoch."""
    errors = ins.samples.errors
    if not errors:
        return None
    index, message = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Finding(
        id=FindingId.SAMPLE_ERRORS, severity=Severity.CRITICAL,
        evidence=f"{len(errors)} of {len(errors) + ins.samples.count} samples raised: "
                 f"dataset[{index}]: {message}{more}",
        recommendation="Fix __getitem__ for these indices: one raising sample stops a whole DataLoader epoch.")


def check_cpu_vs_wait(ins: Inspection, th: Thresholds) -> Finding | None:
    """Whether a sample computes or waits (CPU over wall time), the CPU ceiling, and what workers can give."""
    share = ins.samples.cpu_share
    if share is None or not ins.samples.latency_ms:
        return None
    usable = ins.environment.usable_cpus
    mean = ins.samples.latency_ms["mean"]
    evidence = (f"a sample takes {mean:.2f} ms of which {ins.samples.cpu_ms_mean or 0:.2f} ms is CPU "
                f"({share:.0%}); CPU ceiling {ceiling_text(ins.cpu_ceiling, usable)}; "
                f"one worker delivers {ins.worker_rate or 0:,.0f} samples/s")
    if share < th.waiting_cpu_share:
        needed = ins.cpu_ceiling / ins.worker_rate if ins.cpu_ceiling and ins.worker_rate else None
        reach = f"; about {needed:.0f} workers would reach the CPU ceiling" if needed else ""
        return Finding(
            id=FindingId.CPU_VS_WAIT, severity=Severity.INFO,
            evidence=evidence + reach,
            recommendation=("Samples mostly wait (storage, network, sleeps, locks): throughput scales with "
                            "workers past the CPU count, up to the CPU ceiling; sweep with more workers "
                            "(dataprof sweep … --workers 4,8,16,32) or read faster/concurrently."))
    if share >= th.computing_cpu_share:
        return Finding(
            id=FindingId.CPU_VS_WAIT, severity=Severity.INFO, evidence=evidence,
            recommendation=(f"Samples are mostly CPU work: no loader setting beats the CPU ceiling; workers past "
                            f"the {usable} CPUs can only fill the {max(0.0, 1 - share):.0%} of each sample's time "
                            "that is not CPU (a sweep measures how much that gives). Cut the costliest stages, cache "
                            "decoded data or move augmentation to the GPU."))
    return Finding(id=FindingId.CPU_VS_WAIT, severity=Severity.INFO, evidence=evidence,
                   recommendation="Samples are part CPU, part waiting: expect gains from workers up to a little "
                                  "past the CPU count; a sweep will find where they stop.")


def check_dominant_stage(ins: Inspection, th: Thresholds) -> Finding | None:
    """A transform stage taking at least ``dominant_stage_share`` of the sample time."""
    if not ins.transforms:
        return None
    top = ins.transforms[0]
    if (top.share or 0.0) < th.dominant_stage_share:
        return None
    return Finding(
        id=FindingId.DOMINANT_STAGE, severity=Severity.INFO,
        evidence=f"{top.name} ({top.path}) takes {top.share:.0%} of the sample time: "
                 f"{top.mean_ms:.2f} ms of {ins.samples.latency_ms['mean']:.2f} ms per sample",
        recommendation=f"Start with {top.name}: a cheaper setting, running it on the GPU after the batch "
                       "is built, or caching its output removes that share from every sample.")


def check_stragglers(ins: Inspection, th: Thresholds) -> Finding | None:
    """A heavy tail (p99 or max far above p50), with the slow indices told apart from slow moments."""
    if ins.samples.count < 20 or not ins.samples.latency_ms:
        return None
    p50, p99, top = (ins.samples.latency_ms[k] for k in ("p50", "p99", "max"))
    if p50 <= 0 or (p99 < th.straggler_ratio * p50 and top < th.straggler_max_ratio * p50):
        return None
    slow = [s for s in ins.samples.slowest if s.ms >= th.straggler_ratio * p50]
    fetched = [s for s in slow if s.repeat_ms is not None]
    repeated = [s for s in fetched if (s.repeat_ms or 0.0) >= th.repeat_ratio * s.ms]
    moments = [s for s in fetched if s not in repeated]
    listed = ", ".join(f"[{s.index}] {s.ms:.1f} ms" for s in slow[:5])
    evidence = f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {top:.1f} ms; slowest: {listed}"
    if repeated:
        named = ", ".join(f"[{s.index}]" for s in repeated[:5])
        evidence += f"; fetched again, {len(repeated)} of {len(fetched)} stay slow ({named})"
    if moments:
        evidence += f"{', and' if repeated else '; fetched again,'} {len(moments)} of {len(fetched)} were fast"

    def excess(group: list[SlowSample]) -> float:
        return sum(s.ms - p50 for s in group)

    if repeated and excess(repeated) >= excess(moments):
        advice = ("The samples that stay slow are expensive in themselves (large files, rare branches): "
                  "pre-process or resize them once; with workers, a larger prefetch_factor hides an occasional "
                  "slow one." + (" The others were slow moments, which cost less." if moments else ""))
    elif moments:
        advice = ("The slowness comes and goes (cold cache, remote storage hiccups, garbage collection, other "
                  "processes taking the CPU): a larger prefetch_factor and more workers absorb it; local or "
                  "cached storage removes it.")
    else:
        advice = "A larger prefetch_factor and more workers absorb occasional slow samples."
    return Finding(id=FindingId.STRAGGLERS, severity=Severity.WARNING, evidence=evidence, recommendation=advice)


def check_collate(ins: Inspection, th: Thresholds) -> Finding | None:
    """Collation's share of loading (ms per sample), or why collating failed (critical)."""
    if ins.collate_error:
        return Finding(id=FindingId.COLLATE, severity=Severity.CRITICAL,
                       evidence=f"collating a batch failed: {ins.collate_error}",
                       recommendation="Make samples the same shape and type, or pass --collate-fn.")
    batch = ins.dataset.batch_samples
    if ins.collate_ms is None or not batch or not ins.samples.latency_ms:
        return None
    per_sample = ins.collate_ms / batch
    share = per_sample / (per_sample + ins.samples.latency_ms["mean"])
    objects = ins.dataset.batch_objects or 0
    evidence = (f"collating {batch} samples takes {ins.collate_ms:.2f} ms ({per_sample:.3f} ms per sample, "
                f"{share:.0%} of loading); a batch is {fmt_bytes(ins.dataset.batch_bytes)} in "
                f"{ins.dataset.batch_tensors or 0} tensors and {objects} other Python objects")
    if share < th.collate_share:
        return Finding(id=FindingId.COLLATE, severity=Severity.INFO, evidence=evidence,
                       recommendation="Collation is cheap next to loading a sample.")
    return Finding(id=FindingId.COLLATE, severity=Severity.WARNING, evidence=evidence,
                   recommendation="Collation is a large share: return tensors or numpy arrays of one dtype "
                                  "rather than nested lists/dicts of Python numbers and strings.")


def _capacity(check_id: FindingId, fits: int, evidence: str, fine: str, advice: str, ins: Inspection,
              th: Thresholds, zero_is_critical: bool = False) -> Finding:
    """Info when at least max(8, 2 × usable CPUs) workers fit; a warning (critical if none fit) otherwise."""
    if fits >= max(th.workers_to_check, 2 * ins.environment.usable_cpus):
        return Finding(id=check_id, severity=Severity.INFO, evidence=evidence, recommendation=fine)
    severity = Severity.CRITICAL if zero_is_critical and fits < 1 else Severity.WARNING
    return Finding(id=check_id, severity=severity, evidence=evidence, recommendation=advice)


def check_shm(ins: Inspection, th: Thresholds) -> Finding | None:
    """How many workers' batches in flight fit in /dev/shm (the sweep's 80% rule)."""
    env = ins.environment
    if ins.max_workers_shm is None:
        return None
    prefetch = ins.settings.prefetch
    return _capacity(
        FindingId.SHM_SPACE, ins.max_workers_shm,
        f"/dev/shm has {fmt_bytes(env.shm_free_bytes)} free; each worker keeps {prefetch} batches of "
        f"{fmt_bytes(ins.dataset.batch_bytes)} in flight, so {ins.max_workers_shm} workers fit "
        f"in {HEADROOM:.0%} of it at prefetch_factor={prefetch}",
        "Shared memory is not a limit for this batch size.",
        "Workers beyond that die with 'bus error' / 'No space left on device': enlarge /dev/shm "
        "(docker run --shm-size=8g), lower prefetch_factor or the batch size.",
        ins, th, zero_is_critical=True)


def check_open_files(ins: Inspection, th: Thresholds) -> Finding | None:
    """How many workers' tensors in flight fit in half the open-file limit (``file_descriptor`` strategy)."""
    if ins.environment.open_files_limit is None:
        return None
    limit = f"open-file limit {ins.environment.open_files_limit} (hard {ins.environment.open_files_hard_limit})"
    if ins.max_workers_files is None:
        strategy = ins.environment.sharing_strategy or "unknown"
        if strategy == "file_descriptor":  # the batch's tensors are unknown: its collate failed
            return Finding(id=FindingId.OPEN_FILES, severity=Severity.INFO,
                           evidence=f"{limit}; sharing strategy {strategy}",
                           recommendation=("Every tensor in flight holds one open file with this strategy; how many "
                                           "a batch holds is unknown, as its samples could not be collated."))
        return Finding(id=FindingId.OPEN_FILES, severity=Severity.INFO,
                       evidence=f"{limit}; sharing strategy {strategy}",
                       recommendation="Tensors in flight do not hold open files with this strategy.")
    prefetch = ins.settings.prefetch
    return _capacity(
        FindingId.OPEN_FILES, ins.max_workers_files,
        f"{limit}; with the file_descriptor sharing strategy every tensor in flight holds one: "
        f"{ins.dataset.batch_tensors} per batch × {prefetch} batches per worker, so "
        f"{ins.max_workers_files} workers fit in half the limit",
        "The open-file limit is not a constraint here.",
        "Past that, loading fails with 'Too many open files' or 'received 0 items of ancdata': raise the "
        "limit (ulimit -n), return fewer larger tensors per sample, or "
        "torch.multiprocessing.set_sharing_strategy('file_system').",
        ins, th)


def check_start_method(ins: Inspection, th: Thresholds) -> Finding | None:
    """What the multiprocessing start method costs: fork inherits the dataset, others pickle it per worker."""
    method = ins.environment.start_method
    size = fmt_bytes(ins.pickle_bytes) if ins.pickle_bytes is not None else None
    pickled = (f"pickling the dataset gives {size} in {ins.pickle_s or 0:.2f} s" if size
               else f"the dataset cannot be pickled: {ins.pickle_error}")
    if method == StartMethod.FORK:
        return Finding(
            id=FindingId.START_METHOD, severity=Severity.INFO,
            evidence=f"start method fork: workers inherit the dataset without pickling it ({pickled})",
            recommendation=("Workers start fast; Python objects held by the dataset are copied into each worker "
                            "as they are read, so keep large tables in numpy/arrow arrays."
                            + ("" if size else " Under spawn or forkserver (macOS, Windows, Python 3.14 on "
                               "Linux) these workers could not start.")))
    if ins.pickle_error:
        return Finding(id=FindingId.START_METHOD, severity=Severity.CRITICAL,
                       evidence=f"start method {method}: every worker receives the pickled dataset, but {pickled}",
                       recommendation="Make the dataset picklable (open files and connections lazily in "
                                      "__getitem__ or worker_init_fn, no lambdas), or use the fork start method.")
    return Finding(
        id=FindingId.START_METHOD, severity=Severity.INFO,
        evidence=f"start method {method}: every worker start sends the pickled dataset ({pickled})",
        recommendation="Use persistent_workers=True so that cost is paid once, not every epoch; keep the "
                       "dataset small to pickle (paths, not loaded data).")


CHECKS = (check_errors, check_cpu_vs_wait, check_dominant_stage, check_stragglers, check_collate, check_shm,
          check_open_files, check_start_method)


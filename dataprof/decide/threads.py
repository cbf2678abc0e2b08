"""Thread workers in a sweep's report: the two kinds side by side, and the notes that say why threads were not
measured or what their check found (pure)."""

from __future__ import annotations

from dataprof.results.environment import DatasetInfo
from dataprof.results.settings import SweepSettings
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.threads import ThreadCheck, WorkerKinds
from dataprof.results.vocabulary import DatasetKind, Framework, ThreadVerdict, TrialStatus, WorkerKind

INSTALL = "pip install torchdata (or a torch whose DataLoader takes worker_method)"


def worker_kinds(report: Report) -> WorkerKinds | None:
    """The fastest thread config beside the fastest process config, when both completed; the winner is the
    recommendation's kind (the faster's when the recommendation has no workers)."""
    ok = [t for t in report.trials if t.status == TrialStatus.OK and t.samples_per_s and t.config.num_workers]
    threads = [t for t in ok if t.config.threads]
    processes = [t for t in ok if not t.config.threads]
    if not threads or not processes:
        return None
    thread, process = max(threads, key=rate), max(processes, key=rate)
    chosen = report.recommendation.config if report.recommendation is not None else None
    if chosen is not None and chosen.num_workers:
        winner = "thread" if chosen.threads else "process"
    else:
        winner = "thread" if rate(thread) > rate(process) else "process"
    return WorkerKinds(thread=thread.config, thread_samples_per_s=rate(thread),
                       thread_peak_memory_bytes=thread.memory.peak_memory_bytes, process=process.config,
                       process_samples_per_s=rate(process), process_peak_memory_bytes=process.memory.peak_memory_bytes,
                       winner=winner, thread_cpu_percent=thread.cpu.cpu_percent,
                       process_cpu_percent=process.cpu.cpu_percent,
                       busiest_thread_cpu_percent=thread.cpu.thread_cpu_percent[0] if thread.cpu.thread_cpu_percent
                       else None)


def thread_notes(settings: SweepSettings, dataset: DatasetInfo | None,
                 check: ThreadCheck | None) -> tuple[str, ...]:
    """Why threads were not measured where the user asked for them or the target rules them out, and what the
    thread check found when it did not clear them (``settings``: the report's)."""
    asked = WorkerKind.THREAD in settings.space.worker_kinds
    installed = dataset is not None and dataset.thread_loader is not None
    notes = []
    if settings.framework == Framework.PADDLE or dataset is None:
        return ()
    if asked and not installed:
        notes.append(f"--worker-kind thread: no thread loader is installed here; {INSTALL}")
    elif installed and dataset.kind == DatasetKind.ITERABLE:
        notes.append("threads not tried: an IterableDataset yields its own stream, which threads cannot split "
                     "among themselves as worker processes do (get_worker_info); a map-style Dataset can be")
    elif installed and dataset.loader:
        notes.append("threads not tried: a DataLoader target is rebuilt with its own class; sweep its Dataset "
                     "to measure threads")
    elif installed and settings.world_size > 1 and asked:
        notes.append("threads not tried: thread trials do not run across ranks yet; sweep one rank with "
                     "--worker-kind process,thread")
    if check is not None and check.verdict == ThreadVerdict.UNCHECKED:
        notes.append(f"threads' samples not checked against one process's: {check.detail}; make sure the "
                     "dataset's __getitem__ is thread-safe")
    elif check is not None and check.verdict == ThreadVerdict.FAILED:
        notes.append(f"the thread check failed ({check.detail}); thread trials ran unchecked")
    return tuple(notes)

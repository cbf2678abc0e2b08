"""Thread workers as the report shows them: the two kinds side by side, and the loader code a thread config is."""

from __future__ import annotations

from dataprof.results.knobs import TORCH_THREAD_ARGUMENT, LoaderConfig
from dataprof.results.sweep import Report
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import Framework, WorkerKind


def kinds_text(report: Report) -> str | None:
    """``threads: t8 pf2 1,930 samples/s, PSS 412MB, CPU 1.2 cores (busiest thread 0.3); processes: w4 pf2
    persist 1,880 samples/s, PSS 1.9GB, CPU 1.9 cores``, the recommended kind first, when both kinds completed;
    None otherwise."""
    kinds = report.worker_kinds
    if kinds is None:
        return None

    def one(name: str, config: LoaderConfig, rate: float, pss: int | None, cpu: float | None) -> str:
        memory = f", PSS {fmt_bytes(pss)}" if pss else ""
        cores = f", CPU {cpu / 100:.1f} cores" if cpu is not None else ""
        return f"{name}: {config.label()} {rate:,.0f} samples/s{memory}{cores}"

    threads = one("threads", kinds.thread, kinds.thread_samples_per_s, kinds.thread_peak_memory_bytes,
                  kinds.thread_cpu_percent)
    if kinds.busiest_thread_cpu_percent is not None:
        threads += f" (busiest thread {kinds.busiest_thread_cpu_percent / 100:.1f})"
    processes = one("processes", kinds.process, kinds.process_samples_per_s, kinds.process_peak_memory_bytes,
                    kinds.process_cpu_percent)
    first, second = (threads, processes) if kinds.winner == WorkerKind.THREAD else (processes, threads)
    return f"{first}; {second}"


def thread_loader_code(config: LoaderConfig, batch_size: int, shuffle: bool, collate_fn: str | None,
                       thread_loader: str | None, drop_last: bool = False, getitems: bool = False) -> str:
    """The thread config as code to paste: the DataLoader with ``worker_method="thread"`` where the installed
    torch has it, else the ``torchdata.nodes`` pipeline dataprof measured (``dataset`` is the user's; ``getitems``:
    it fetches a batch's samples at once, ``__getitems__``, as the measured pipeline and a DataLoader do)."""
    collate = collate_fn.rpartition(":")[2] if collate_fn else None
    if thread_loader == Framework.TORCH:
        parts = ["dataset", f"batch_size={batch_size}", *(["shuffle=True"] if shuffle else []),
                 *(f"{name}={value!r}" for name, value in config.dataloader_kwargs().items()),
                 f'{TORCH_THREAD_ARGUMENT}="thread"', *([f"collate_fn={collate}"] if collate else [])]
        return f"DataLoader({', '.join(parts)})"
    sampler = "RandomSampler" if shuffle else "SequentialSampler"
    order = "" if config.in_order is not False else ", in_order=False"
    lines = [
        "import torchdata.nodes as tn",
        f"from torch.utils.data import BatchSampler, {sampler}, default_collate",
        *([f"collate_fn = {collate}"] if collate else ["collate_fn = default_collate"]),
        "def fetch(indices):  # one thread fetches and collates a whole batch, as a DataLoader worker does",
        "    return collate_fn(dataset.__getitems__(indices))" if getitems else
        "    return collate_fn([dataset[i] for i in indices])",
        f"node = tn.SamplerWrapper(BatchSampler({sampler}(dataset), batch_size={batch_size}, drop_last={drop_last}))",
        f'node = tn.ParallelMapper(node, map_fn=fetch, num_workers={config.num_workers}, method="thread"{order})',
        *(["node = tn.PinMemory(node)"] if config.pin_memory else []),
        f"node = tn.Prefetcher(node, prefetch_factor={config.prefetched_batches})",
        "loader = tn.Loader(node)  # each `for batch in loader` is an epoch",
    ]
    return "\n".join(lines)

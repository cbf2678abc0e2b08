"""How true dataprof's thread and process figures are, and whether it recommends the faster kind.

Three pipelines of ``examples/threads.py``: ``CompressedRecords`` (zlib decompression: C code that releases the
GIL), ``PythonTokens`` (a pure-Python tokenizer: it holds the GIL) and ``NumpyAugment`` (small numpy operations:
part each). For each, every round, in alternating order (A B C, then C B A):

- A: a dataprof sweep of ``--workers W --worker-kind process,thread`` (grid, no rules of thumb): its process
  figure (wW), its thread figure (tW) and the kind it recommends;
- B: a bare ``for batch in DataLoader(..., num_workers=W)`` loop in a fresh process;
- C: a bare ``torchdata.nodes`` loop in a fresh process, written out here as torchdata's migration guide writes
  it (batch sampler → ParallelMapper over W threads → Prefetcher), not through dataprof's code.

Both bare loops skip dataprof's warm-up, then time ``--seconds`` as a training script loops: ``for batch in
loader`` over each epoch, the next epoch started after the last one's loop ended. It prints each round side by
side, then the medians: the goal is dataprof within 10% of each bare loop, and the recommended kind the faster
bare one (or within noise of it and lighter). ``--length``: samples per epoch; a few batches' worth weighs each
epoch's start (a thread pipeline stops and joins its threads there).

    python benchmarks/threads.py [--workers 2] [--rounds 3] [--seconds 3] [--batch-size 32] [--length 4096]
                                 [--pipelines CompressedRecords,PythonTokens,NumpyAugment]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from _bare import interleaved, median, median_error  # noqa: E402

import dataprof  # noqa: E402
from dataprof.results.knobs import warmup_batches  # noqa: E402

PIPELINES = ("CompressedRecords", "PythonTokens", "NumpyAugment")


def bare(spec: dict[str, Any]) -> float:
    """Samples/s of a plain loop over a fresh loader of ``spec["kind"]`` (``process``: a DataLoader; ``thread``:
    a torchdata.nodes pipeline), after dataprof's warm-up, for ``seconds``, crossing epochs."""
    import threads
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, default_collate

    dataset = getattr(threads, spec["pipeline"])(length=spec["length"])
    workers, batch_size = spec["workers"], spec["batch_size"]
    if spec["kind"] == "process":
        loader: Any = DataLoader(dataset, batch_size=batch_size, num_workers=workers, prefetch_factor=2,
                                 persistent_workers=True)
    else:
        import torchdata.nodes as tn

        def fetch(indices: list[int]) -> Any:
            return default_collate([dataset[i] for i in indices])

        node: Any = tn.SamplerWrapper(BatchSampler(SequentialSampler(dataset), batch_size=batch_size,
                                                   drop_last=False))
        node = tn.ParallelMapper(node, map_fn=fetch, num_workers=workers, method="thread")
        node = tn.Prefetcher(node, prefetch_factor=2 * workers)
        loader = tn.Loader(node)
    iterator = iter(loader)
    for _ in range(warmup_batches(workers, 2)):
        next(iterator)
    start = time.perf_counter()
    samples = 0
    while time.perf_counter() - start < spec["seconds"]:
        for batch in iterator:  # the rest of the epoch, as a training loop takes it
            samples += len(batch)
            if time.perf_counter() - start >= spec["seconds"]:
                break
        else:
            iterator = iter(loader)
    return samples / (time.perf_counter() - start)


def bare_fresh(spec: dict[str, Any]) -> float:
    out = subprocess.run([sys.executable, __file__, "--bare", json.dumps(spec)], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


def dataprof_figures(pipeline: str, args: argparse.Namespace) -> dict[str, Any]:
    report = dataprof.sweep(f"{ROOT}/examples/threads.py:{pipeline}", batch_size=args.batch_size,
                            workers=[args.workers], prefetch_factor=2, trial_seconds=args.seconds,
                            strategy="grid", rules_of_thumb=False, worker_kind="process,thread",
                            args={"length": args.length})
    process = next(t for t in report.trials if t.config.num_workers and not t.config.threads)
    thread = next(t for t in report.trials if t.config.threads)
    best = report.best
    return {"process": process.samples_per_s, "thread": thread.samples_per_s,
            "process_pss": process.memory.peak_memory_bytes, "thread_pss": thread.memory.peak_memory_bytes,
            "recommended": None if best is None else ("thread" if best.config.threads else
                                                      "process" if best.config.num_workers else "w0"),
            "gil": report.settings.space.gil_release, "status": (process.status, thread.status)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=4096, help="samples per epoch")
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    args = parser.parse_args()
    spec = {"workers": args.workers, "batch_size": args.batch_size, "seconds": args.seconds, "length": args.length}
    rows: dict[str, list[dict[str, Any]]] = {}
    for pipeline in args.pipelines.split(","):
        for number in range(args.rounds):
            runs = {
                "dataprof": lambda p=pipeline: dataprof_figures(p, args),
                "bare_process": lambda p=pipeline: bare_fresh({**spec, "pipeline": p, "kind": "process"}),
                "bare_thread": lambda p=pipeline: bare_fresh({**spec, "pipeline": p, "kind": "thread"}),
            }
            order, row = interleaved(runs, number)
            rows.setdefault(pipeline, []).append(row)
            print(f"{pipeline} round {number + 1} ({'→'.join(order)}): GIL released {row['gil'] or 0:.0%}; "
                  f"w{args.workers} {row['process']:,.0f} vs bare {row['bare_process']:,.0f} "
                  f"({row['process'] / row['bare_process'] - 1:+.1%}); t{args.workers} {row['thread']:,.0f} vs "
                  f"bare {row['bare_thread']:,.0f} ({row['thread'] / row['bare_thread'] - 1:+.1%}); recommended "
                  f"{row['recommended']}; PSS w {(row['process_pss'] or 0) / 1e6:.0f} MB, t "
                  f"{(row['thread_pss'] or 0) / 1e6:.0f} MB", flush=True)
    w = args.workers
    print(f"\n| pipeline | GIL released | dataprof w{w} | bare w{w} | error | dataprof t{w} | bare t{w} | error "
          "| faster bare | recommended | PSS w ÷ t |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pipeline, runs in rows.items():
        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return median(runs, key)
        process_error, thread_error = median_error(runs, "process", "bare_process"), \
            median_error(runs, "thread", "bare_thread")
        faster = "thread" if med("bare_thread") > med("bare_process") else "process"
        chosen = statistics.mode(r["recommended"] for r in runs)
        print(f"| {pipeline} | {med('gil'):.0%} | {med('process'):,.0f} | {med('bare_process'):,.0f} | "
              f"{process_error:+.1%} | {med('thread'):,.0f} | {med('bare_thread'):,.0f} | {thread_error:+.1%} | "
              f"{faster} ({med('bare_thread') / med('bare_process'):.2f}× t÷w) | {chosen} | "
              f"{med('process_pss') / max(1.0, med('thread_pss')):.1f} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare":
        print(bare(json.loads(sys.argv[2])), flush=True)
        os._exit(0)  # torchdata's threads may still be in torch code at exit, which aborts the interpreter
    main()

"""How true dataprof's cold and warm figures are: against bare loops over the same files, evicted the same way.

A dataset of ``.npy`` files (``examples/files.py:NpyFiles``, ~1 GB: 4096 files of 256 KiB, one ``np.load`` a
sample). For each config, every round, in alternating order (A B C, then C B A):

- A: a dataprof sweep of that config alone with ``--cache cold`` (its workers started by ``--start-methods``: a
  row each), every file read first: its warm trial, then its
  cold trial (the data files the trials read evicted from the page cache first; the window ends with the first
  pass);
- B: a bare ``for batch in DataLoader(...)`` loop in a fresh process after the same eviction (every file of the
  dataset, ``posix_fadvise DONTNEED``): warm-up as dataprof's, then timed to the end of the first pass (or
  ``--seconds``);
- C: the same bare loop warm (every file read first), timed ``--seconds`` after warm-up.

It prints each round's figures side by side, the storage bytes per sample dataprof read cold against the
files' size, then the medians: the goal is dataprof within 10% of each bare loop. Run as root or not: nothing
here needs it.

    python benchmarks/cold.py [--root /var/tmp/coldbench] [--count 4096] [--kib 256] [--workers 0,4]
                              [--rounds 3] [--seconds 3] [--batch-size 32] [--start-methods fork,forkserver]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from _bare import interleaved, median, median_error  # noqa: E402

from dataprof.measure.cache.page_cache import evict  # noqa: E402
from dataprof.results.knobs import warmup_batches  # noqa: E402

TARGET = f"{ROOT}/examples/files.py:NpyFiles"


def bare(spec: dict[str, Any]) -> float:
    """Samples/s of a plain loop over a fresh DataLoader: to the end of the first pass (``cold``) or for
    ``seconds`` crossing epochs (warm), after dataprof's warm-up."""
    from files import NpyFiles
    from torch.utils.data import DataLoader

    workers = spec["workers"]
    dataset = NpyFiles(spec["root"], spec["count"], spec["kib"])
    method = {"multiprocessing_context": spec["method"]} if workers and spec.get("method") else {}
    loader = DataLoader(dataset, batch_size=spec["batch_size"], num_workers=workers,
                        **({"prefetch_factor": 2, "persistent_workers": True, **method} if workers else {}))
    iterator = iter(loader)
    for _ in range(warmup_batches(workers, 2 if workers else None)):
        next(iterator)
    start = time.perf_counter()
    samples = 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            if spec["cold"]:
                break  # the first pass ended: what follows is cached
            iterator = iter(loader)
            batch = next(iterator)
        samples += len(batch)
        if time.perf_counter() - start >= spec["seconds"]:
            break
    return samples / (time.perf_counter() - start)


def bare_fresh(spec: dict[str, Any]) -> float:
    out = subprocess.run([sys.executable, __file__, "--bare", json.dumps(spec)], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


def dataprof_rates(args: argparse.Namespace, workers: int, method: str | None) -> dict[str, Any]:
    """A sweep of ``workers`` alone (``method``: its workers' start method), warm then cold, as the command line
    runs it."""
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "run.json"
        subprocess.run([sys.executable, "-m", "dataprof", "sweep", TARGET, "--arg", f"root={args.root}",
                        "--arg", f"count={args.count}", "--arg", f"kib={args.kib}", "--batch-size",
                        str(args.batch_size), "--workers", str(workers), "--prefetch-factor", "2",
                        "--trial-seconds", str(args.seconds), "--no-rules-of-thumb", "--strategy", "grid",
                        "--cache", "cold", "--worker-kind", "process", "--json", str(path),
                        *(["--start-method", method] if method and workers else [])],
                       check=True, capture_output=True, cwd=ROOT)
        report = json.loads(path.read_text())
    warm = next(t for t in report["trials"] if t["config"]["num_workers"] == workers and t["status"] == "ok")
    cold = next(t for t in report["cold_trials"] if t["config"]["num_workers"] == workers and t["status"] == "ok")
    return {"warm": warm["samples_per_s"], "cold": cold["samples_per_s"], "bytes": cold["read_bytes_per_sample"],
            "files": cold["files_per_sample"], "window": cold["window_s"], "pass_end": cold["first_pass_end"],
            "resident": cold["resident_after_eviction"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="/var/tmp/coldbench")
    parser.add_argument("--count", type=int, default=4096)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument("--workers", default="0,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--start-methods", default="fork",
                        help="the start methods of the worker rows, each a row of its own (fork,forkserver)")
    args = parser.parse_args()
    from files import generate

    paths = [str(p) for p in generate(Path(args.root), args.count, args.kib)]
    file_bytes = Path(paths[0]).stat().st_size
    print(f"{args.count} files of {file_bytes:,} bytes ({args.count * file_bytes / 1e9:.2f} GB) in {args.root}, "
          f"batch {args.batch_size}, {args.rounds} rounds")
    spec = {"root": args.root, "count": args.count, "kib": args.kib, "batch_size": args.batch_size,
            "seconds": args.seconds}
    rows: dict[str, list[dict[str, Any]]] = {}
    configs = [(w, m) for w in (int(w) for w in args.workers.split(",")) for m in
               (args.start_methods.split(",") if w else ["fork"])]
    for workers, method in configs:
        label = f"w{workers}" + (f" {method}" if workers and method != "fork" else "")
        for number in range(args.rounds):
            runs = {  # every run that starts warm reads every file first: a run before it may have evicted them
                "dataprof": lambda w=workers, m=method: ([Path(p).read_bytes() for p in paths],
                                                         dataprof_rates(args, w, m))[1],
                "bare_cold": lambda w=workers, m=method: (evict(paths, check=False), bare_fresh(
                    {**spec, "workers": w, "method": m, "cold": True}))[1],
                "bare_warm": lambda w=workers, m=method: ([Path(p).read_bytes() for p in paths],
                                                          bare_fresh({**spec, "workers": w, "method": m,
                                                                      "cold": False}))[1],
            }
            order, row = interleaved(runs, number)
            rows.setdefault(label, []).append(row)
            print(f"{label} round {number + 1} ({'→'.join(order)}): cold {row['cold']:,.0f} vs bare "
                  f"{row['bare_cold']:,.0f} ({row['cold'] / row['bare_cold'] - 1:+.1%}), warm {row['warm']:,.0f} "
                  f"vs bare {row['bare_warm']:,.0f} ({row['warm'] / row['bare_warm'] - 1:+.1%}); cold read "
                  f"{row['bytes'] or 0:,.0f} B/sample ({(row['bytes'] or 0) / file_bytes:.2f}× the file), "
                  f"{row['files'] or 0:.2f} files/sample, window {row['window']:.1f} s"
                  f"{' (first pass)' if row['pass_end'] else ''}, {100 * (row['resident'] or 0):.0f}% left cached",
                  flush=True)
    print("\n| config | dataprof cold | bare cold | error | dataprof warm | bare warm | error | cold ÷ warm (bare) "
          "| storage bytes/sample ÷ file |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, runs in rows.items():
        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return median(runs, key)
        cold_error, warm_error = median_error(runs, "cold", "bare_cold"), median_error(runs, "warm", "bare_warm")
        print(f"| {label} | {med('cold'):,.0f} | {med('bare_cold'):,.0f} | {cold_error:+.1%} | {med('warm'):,.0f} "
              f"| {med('bare_warm'):,.0f} | {warm_error:+.1%} | {med('bare_cold') / med('bare_warm'):.2f} "
              f"| {med('bytes') / file_bytes:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare":
        print(bare(json.loads(sys.argv[2])))
    else:
        main()

"""The reference: a bare ``for batch in DataLoader(...)`` loop, timed the same way.

Warm-up drains the prefetch buffer (as dataprof does), then a fixed whole
number of worker rounds is timed with nothing else in the loop. It runs in a
fresh interpreter, as dataprof's trials do, so neither side inherits the
other's state.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.vocabulary import WorkerKind
from dataprof.sweeper import run_sweep


def bare_rate(dataset: Any, config: LoaderConfig, batch_size: int, seconds: float) -> float:
    """Samples/s of a plain loop over a fresh DataLoader (the config's framework's), steady state."""
    if config.framework == "paddle":
        from paddle.io import DataLoader
    else:
        from torch.utils.data import DataLoader
    from dataprof.backends.target import loader_framework

    # a DataLoader target is iterated as the user's code built it (``config`` then only names its settings)
    loader = dataset if loader_framework(dataset) else \
        DataLoader(dataset, batch_size=batch_size, **config.dataloader_kwargs())
    rounds = max(1, config.num_workers)
    warmup = 2 if config.num_workers == 0 else config.num_workers * (config.prefetch_factor or 2) + rounds
    iterator = iter(loader)
    for _ in range(warmup):
        try:
            next(iterator)
        except StopIteration:
            iterator = iter(loader)
    start = time.perf_counter()
    samples = batches = 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:  # cross epochs, as training (and dataprof) does
            iterator = iter(loader)
            batch = next(iterator)
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        samples += len(first)
        batches += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and batches % rounds == 0 and batches >= 3 * rounds:
            break
    del iterator
    return samples / elapsed


def bare_rate_fresh(target: str, args: dict[str, Any], config: LoaderConfig, batch_size: int,
                    seconds: float, prefix: tuple[str, ...] = ()) -> float:
    """:func:`bare_rate` in a new Python process (started through ``prefix``: ``("taskset", "-c", "0")``)."""
    root = Path(__file__).resolve().parent.parent
    spec = json.dumps({"target": target, "args": args, "config": config.to_dict(), "batch_size": batch_size,
                       "seconds": seconds})
    out = subprocess.run([*prefix, sys.executable, __file__, spec], check=True, capture_output=True, text=True,
                         cwd=root)
    return float(out.stdout.strip().splitlines()[-1])


def dataprof_rates(target: str, args: dict[str, Any], configs: list[LoaderConfig], batch_size: int | None,
                   seconds: float) -> dict[LoaderConfig, float]:
    """dataprof's samples/s for each config, from a real sweep (``batch_size`` None: a loader target's own)."""
    settings = SweepSettings(
        target=target,
        space=SearchSpace(workers=tuple(c.num_workers for c in configs),
                          prefetch_factors=(configs[-1].prefetch_factor or 2,),
                          persistent_workers=(bool(configs[-1].persistent_workers),),
                          in_order=(configs[-1].in_order is not False,),
                          start_methods=(configs[-1].multiprocessing_context,)
                          if configs[-1].multiprocessing_context else (),
                          worker_kinds=(WorkerKind.THREAD.value,) if configs[-1].threads else ()),
        batch_size=batch_size or 64, batch_size_given=batch_size is not None, target_kwargs=args,
        trial_seconds=seconds, strategy="grid", rules_of_thumb=False,
    )
    report = run_sweep(settings)
    return {t.config: t.samples_per_s or 0.0 for t in report.trials if t.status == "ok"}


if __name__ == "__main__":
    import warnings

    from dataprof.backends.target import build_dataset, load_object

    warnings.filterwarnings("ignore", message="This DataLoader will create")
    request = json.loads(sys.argv[1])
    sys.path.insert(0, ".")
    dataset = build_dataset(load_object(request["target"], "."), request["args"], request["target"])
    print(bare_rate(dataset, LoaderConfig.from_dict(request["config"]), request["batch_size"], request["seconds"]))


def interleaved(runs: dict[str, Callable[[], Any]], number: int) -> tuple[list[str], dict[str, Any]]:
    """Round ``number`` of ``runs``: in their order on even rounds, reversed on odd ones (A B C, then C B A), so
    the machine's drift over minutes weighs on each alike. The order, and the row: the ``dataprof`` run's
    figures (a dict) beside each other run's result by name."""
    order = list(runs) if number % 2 == 0 else list(reversed(runs))
    got = {name: runs[name]() for name in order}
    return order, {**got.pop("dataprof"), **got}


def median(rows: list[dict[str, Any]], key: str) -> float:
    """The median of ``key`` over the rounds' rows (a missing figure counts as 0)."""
    import statistics

    return statistics.median(row[key] or 0.0 for row in rows)


def median_error(rows: list[dict[str, Any]], key: str, bare: str) -> float:
    """The median over the rounds of dataprof's ``key`` against the bare loop's ``bare``, each round apart."""
    import statistics

    return statistics.median(row[key] / row[bare] - 1 for row in rows)

"""dataprof: a throughput profiler for PyTorch data pipelines.

    import dataprof
    report = dataprof.sweep(MyDataset(), batch_size=64)      # or "pkg.mod:MyDataset"
    report.best, report.diagnosis, report.to_json()
    dataprof.inspect(MyDataset())
    dataprof.plan(report, cpus=96, ranks_per_node=8, step_ms=120)   # that machine's config, predicted
    with dataprof.watch() as w: train()       # then w.report: does the training wait for data?
    dataprof.tune("train.py", ["--epochs", "1"])   # the training itself as the trial

Importing this package is cheap: torch, psutil and pynvml are imported only by
the modules that need them.
"""

from __future__ import annotations

from dataprof.api import follow_tune, inspect, plan, sweep, tune, watch
from dataprof.results.environment import NodeJob
from dataprof.version import __version__

__all__ = ["NodeJob", "__version__", "follow_tune", "inspect", "plan", "sweep", "tune", "watch"]

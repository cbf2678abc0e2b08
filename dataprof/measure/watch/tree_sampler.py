"""A sampler in a process of its own, for ``dataprof.watch()``: it samples the process that started it (and
that process's workers, not itself) from outside, so no sampling thread competes for the training's GIL.

Started as ``python -m dataprof.measure.watch.tree_sampler PID``. The watched code's own events arrive as JSON
lines on stdin (``measure/watch/events.py``): ``WindowOpen`` (the first batch came), ``Device`` (sample this GPU),
``WindowEnd``. At the end of stdin it prints the sampler's summary as one JSON line and exits.
"""

from __future__ import annotations

import json
import os
import sys

from dataprof.measure.gpu import NullGpuProbe
from dataprof.measure.probes import ProcessTreeProbe
from dataprof.measure.sampler import Sampler
from dataprof.measure.summary import summarize
from dataprof.measure.system import SystemProbe
from dataprof.measure.watch.collector import SamplerMarks
from dataprof.measure.watch.events import Device, WindowEnd, WindowOpen, heard
from dataprof.measure.watch.resources import gpu_timeline, storage_of


def main(argv: list[str]) -> int:
    """Sample PID until stdin ends; print the summary (with ``gpu_reason``)."""
    sampler = Sampler(ProcessTreeProbe(int(argv[0]), exclude=os.getpid(), files=True), SystemProbe(),
                      NullGpuProbe()).start()
    marks, reason = SamplerMarks(sampler), None
    for line in sys.stdin:
        event = heard(json.loads(line))
        if isinstance(event, WindowOpen):
            marks.mark_window_start()
        elif isinstance(event, Device):
            reason = marks.use_gpu(event)
        elif isinstance(event, WindowEnd):
            marks.mark_window_end()
    sampler.stop()
    sampler.gpu_probe.close()
    print(json.dumps({**summarize(sampler.samples), **storage_of(sampler),
                      "gpu_timeline": gpu_timeline(sampler.samples.gpu), "gpu_reason": reason}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Store requests counted, for ``benchmarks/nodes.py --parts requests``: on ``PYTHONPATH`` with
``DATAPROF_BENCH_STORE_COUNT=DIR`` set, each Python process that imports dataprof's store client counts the
requests it makes through ``torch.distributed.PrefixStore`` (every request dataprof's processes make to a job's
store goes through one) and writes them to ``DIR/<pid>.json`` at its exit. Nothing happens without the
variable."""

from __future__ import annotations

import atexit
import collections
import json
import os
from pathlib import Path

REQUESTS = ("set", "get", "add", "check", "wait", "compare_set", "delete_key")


def _install(out: Path) -> None:
    import torch.distributed as dist

    counts: collections.Counter[str] = collections.Counter()

    def counted(name: str) -> object:
        def request(self: object, *args: object, **kwargs: object) -> object:
            counts[name] += 1
            return getattr(super(Counting, self), name)(*args, **kwargs)  # type: ignore[misc]
        return request

    Counting = type("Counting", (dist.PrefixStore,), {name: counted(name) for name in REQUESTS})
    dist.PrefixStore = Counting  # type: ignore[misc]
    atexit.register(lambda: counts and (out / f"{os.getpid()}.json").write_text(json.dumps(counts)))


if os.environ.get("DATAPROF_BENCH_STORE_COUNT"):
    _install(Path(os.environ["DATAPROF_BENCH_STORE_COUNT"]))

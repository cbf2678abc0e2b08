"""What a config costs (pure): one order for the sweep's recommendation and ``tune``'s answer, read from the knob
records. Among configs the measurements cannot tell apart, both take the cheapest by :class:`Cost`, and say why
by :func:`cheaper`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dataprof.results.knobs import KnobValues, LoaderConfig
from dataprof.results.registry import REGISTRY, record_of


@dataclasses.dataclass(frozen=True, order=True)
class Cost:
    """What a config costs, compared field by field, least first."""

    new_code: bool
    """Threads in place of the script's worker processes: a new loader in its code, not a knob."""
    processes: int
    """Worker processes, every node's together: each a CPU's claim, a copy of the main process's pages."""
    threads: int
    """Worker threads, every node's together: a CPU's claim each, in one heap (lighter than a process)."""
    prefetch: int
    """Batches each worker keeps ready, as given (0: the loader's default)."""
    costly: int
    """Knobs changed whose records say a change costs (the order, the start method, Paddle's shared memory and
    buffer reader)."""
    edits: int
    """Knobs changed at all (a node's own knobs count once more): the lines a user edits."""
    memory: int
    """Peak memory (PSS) measured, bytes (0: not read)."""
    pinned: bool
    """Page-locked batches: a pinning thread, locked host memory."""


def cost(config: LoaderConfig | KnobValues, changes: Mapping[str, Any], workers: int, memory: int | None,
         node_edits: int = 0, new_code: bool = False) -> Cost:
    """The cost of ``config`` (a sweep's, or the knobs a ``tune`` run's loader has), changed by ``changes`` from
    what the user has (the loader's own defaults in a sweep, the script's settings in ``tune``), with ``workers``
    on every node together."""
    threads = config.threads
    return Cost(new_code=new_code, processes=0 if threads else workers, threads=workers if threads else 0,
                prefetch=int(config.value("prefetch_factor") or 0),
                costly=sum(1 for name in changes if name != "num_workers" and record_of(name).costs),
                edits=len(changes) + node_edits, memory=memory or 0, pinned=bool(config.value("pin_memory")))


def sweep_cost(config: LoaderConfig, memory: int | None) -> Cost:
    """The :func:`cost` of a sweep's config: its changes are the knobs it sets away from the loader's own
    defaults."""
    changes = {knob.name: value for knob in REGISTRY
               if (value := config.value(knob.name)) is not None and value != knob.loader_default}
    return cost(config, changes, config.num_workers, memory)


def cheaper(chosen: Cost, other: Cost) -> str:
    """How ``chosen`` is cheaper than ``other``, in words: the first way they differ, with both figures."""
    if chosen.new_code != other.new_code:
        return "needs no new loader in your code"
    if chosen.processes < other.processes and chosen.threads:
        return "uses threads instead of worker processes"
    for field, noun in (("processes", "worker"), ("threads", "thread")):
        mine, theirs = getattr(chosen, field), getattr(other, field)
        if mine != theirs:
            return f"uses {theirs - mine} fewer {noun}{'s' if theirs - mine != 1 else ''} ({mine} against {theirs})"
    if chosen.prefetch != other.prefetch:
        return f"prefetches less ({chosen.prefetch} against {other.prefetch} batches a worker)"
    if chosen.costly != other.costly:
        return f"changes fewer knobs whose change costs ({chosen.costly} against {other.costly})"
    if chosen.edits != other.edits:
        return f"changes fewer of the loader's knobs ({chosen.edits} against {other.edits})"
    if chosen.memory != other.memory:
        return "uses less memory"
    return "pins no memory" if other.pinned and not chosen.pinned else "costs no more"

"""The worker counts a sweep may try (pure): the range given, or ``auto``'s from the usable CPUs, with the
reason the report shows for it."""

from __future__ import annotations

from dataprof.errors import UsageError
from dataprof.results.environment import CpuBudget


def worker_space(workers: tuple[int, ...] | None, budget: CpuBudget,
                 strategy: str = "adaptive") -> tuple[tuple[int, ...], str]:
    """``workers`` (None: ``auto``, from ``budget``, each rank's share under torchrun), with the reason the report
    shows for them."""
    if workers is not None:
        return at_least(workers, "--workers", 0), "given with --workers"
    if strategy == "adaptive":
        values = adaptive_workers(budget.usable)
        return values, (f"auto: climbs 2, 4, 8, … up to {values[-1]} while throughput rises beyond noise "
                        f"and memory, /dev/shm and open files allow; {budget.explain()}")
    values = auto_workers(budget.usable)
    return values, (f"auto: 0, 1, 2, 4, … up to 2× the {budget.explain()}, plus the CPU count; "
                    "latency-bound loaders scale past the cores, CPU-bound ones stop at them")


def at_least(values: tuple[int, ...], flag: str, minimum: int) -> tuple[int, ...]:
    """``values`` unless one is below ``minimum`` (a UsageError naming ``flag``)."""
    low = next((value for value in values if value < minimum), None)
    if low is not None:
        raise UsageError(f"{flag}: {low} is below the minimum of {minimum}")
    return values


def auto_workers(usable_cpus: int) -> tuple[int, ...]:
    """0, 1, 2, 4, … up to 2× the usable CPUs, plus the CPU count itself.

    Latency-bound loaders keep scaling past the core count, CPU-bound ones
    stop at it; this range shows both shapes without a huge grid.
    """
    top = 2 * max(1, usable_cpus)
    values = {0, usable_cpus, top}
    power = 1
    while power <= top:
        values.add(power)
        power *= 2
    return tuple(sorted(values))


CLIMB_TOP = 128
"""The most worker processes a climb tries on any machine (the sweep's, on more than 32 CPUs, four per CPU):
``tune``'s climb too."""


def adaptive_workers(usable_cpus: int) -> tuple[int, ...]:
    """The ladder the adaptive search may climb: 0, 2, 4, 8, … up to max(:data:`CLIMB_TOP`, 4× usable CPUs), plus
    the CPU count.

    It climbs only while throughput rises beyond noise and the memory,
    ``/dev/shm`` and open-file budgets allow, so a high top costs nothing for
    a loader that stops scaling early. One worker is not a rung (it loads no
    faster than the main process; refinement tries it when two workers win),
    except on a single-CPU machine.
    """
    top = max(CLIMB_TOP, 4 * max(1, usable_cpus))
    values = {0, usable_cpus}
    power = 2
    while power <= top:
        values.add(power)
        power *= 2
    return tuple(sorted(values))

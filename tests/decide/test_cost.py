"""One cost for the sweep's recommendation and tune's answer, read from the knob records."""

from __future__ import annotations

from dataprof.decide.cost import cheaper, cost, sweep_cost
from dataprof.results.knobs import KnobValues, LoaderConfig


def test_a_sweep_counts_changes_from_the_loader_s_own_defaults_costly_ones_first() -> None:
    plain = sweep_cost(LoaderConfig(4, False, 2, True), None)
    pinned = sweep_cost(LoaderConfig(4, True, 2, True), None)
    unordered = sweep_cost(LoaderConfig(4, False, 2, True, in_order=False), None)
    assert plain < pinned < unordered  # in_order=False costs (its record says so); pinning one more edit than persist
    assert (unordered.costly, pinned.costly, pinned.edits - plain.edits) == (1, 0, 1)
    assert cheaper(plain, pinned) == "changes fewer of the loader's knobs (1 against 2)"
    assert cheaper(pinned, unordered) == "changes fewer knobs whose change costs (0 against 1)"


def test_threads_are_lighter_than_processes_unless_they_ask_for_new_code() -> None:
    processes = sweep_cost(LoaderConfig(2, False, 2, True), None)
    threads = sweep_cost(LoaderConfig(8, False, 2, None, worker_kind="thread"), None)
    assert threads < processes and cheaper(threads, processes) == "uses threads instead of worker processes"
    in_place = cost(KnobValues(num_workers=8, worker_kind="thread"), {"worker_kind": "thread"}, 8, None, new_code=True)
    kept = cost(KnobValues(num_workers=16), {"num_workers": 16}, 16, None)
    assert kept < in_place and cheaper(kept, in_place) == "needs no new loader in your code"


def test_workers_on_every_node_then_prefetch_then_memory() -> None:
    two = cost(KnobValues(num_workers=2), {"num_workers": 2}, 4, 2_000)
    four = cost(KnobValues(num_workers=4), {"num_workers": 4}, 8, 1_000)
    deeper = cost(KnobValues(num_workers=2, prefetch_factor=4), {"num_workers": 2, "prefetch_factor": 4}, 4, 1_000)
    assert two < four and cheaper(two, four) == "uses 4 fewer workers (4 against 8)"
    assert two < deeper and cheaper(two, deeper) == "prefetches less (0 against 4 batches a worker)"
    lighter = cost(KnobValues(num_workers=2), {"num_workers": 2}, 4, 1_000)
    assert lighter < two and cheaper(lighter, two) == "uses less memory"
    assert cheaper(two, two) == "costs no more"

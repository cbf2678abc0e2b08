"""The thread loader: the same batches as the DataLoader, a raising sample named, what is installed, and the
thread-safety check."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
from typing import Any

import pytest
import torch

from dataprof.backends.threads import SampleError, thread_loader
from dataprof.backends.torch_backend import TorchBackend
from dataprof.errors import TargetError
from dataprof.measure.sweep.thread_check import in_a_fresh_copy, in_this_process, run_thread_check, verdict
from dataprof.results.knobs import LoaderConfig
from tests.fixtures.datasets import RacyCache, RaisesAt, RandomSamples, SharedCursor, SlowBatches, Stream, Tiny

pytest.importorskip("torchdata.nodes")
THREADS = LoaderConfig(4, prefetch_factor=2).as_threads()


def batches(config: LoaderConfig, dataset: Any, shuffle: bool = False) -> list[list[float]]:
    if shuffle:
        torch.manual_seed(7)
    loader, _ = TorchBackend().build_loader(dataset, config, 8, None, shuffle, False)
    return [batch[:, 0].tolist() for batch in loader]


def test_the_thread_loader_yields_the_dataloaders_batches_in_its_order() -> None:
    dataset = Tiny(100)  # 12 full batches and a short one
    assert batches(THREADS, dataset) == batches(LoaderConfig(0), dataset)
    shuffled = batches(THREADS, dataset, shuffle=True)  # the sampler's own order (its seed drawn otherwise)
    assert shuffled != batches(THREADS, dataset) and sorted(sum(shuffled, [])) == sorted(sum(batches(THREADS,
                                                                                                  dataset), []))


@pytest.mark.slow
def test_the_thread_loader_yields_what_worker_processes_yield() -> None:
    dataset = Tiny(100)
    assert batches(THREADS, dataset) == batches(LoaderConfig(2, prefetch_factor=2, persistent_workers=True), dataset)


def test_a_sample_that_raises_in_a_thread_is_named_by_its_index_and_line() -> None:
    with pytest.raises(SampleError, match=r"in a loader thread: dataset\[37\] raised ValueError: .*datasets.py:\d+"):
        batches(THREADS, RaisesAt(37))


def mappers_left(loader: Any) -> int:
    """torchdata's thread-mapper iterators (each holds its epoch's threads) alive, of ``loader``'s own, after an
    epoch in a plain loop and the start of the next, the garbage collector off: one, where each epoch's start stops
    and joins the last one's threads (or a count of 0 where this torchdata names its mapper otherwise)."""
    def live() -> int:
        return sum(type(found).__name__ == "_ParallelMapperIter" for found in gc.get_objects())

    collecting = gc.isenabled()
    gc.disable()
    try:
        before = live()
        for _ in loader:
            pass
        iter(loader)
        return live() - before
    finally:
        if collecting:
            gc.enable()


def plain_pipeline(dataset: Any, workers: int = 2) -> Any:
    """The pipeline as torchdata's migration guide (and dataprof's thread code to paste) writes it."""
    import torchdata.nodes as tn
    from torch.utils.data import BatchSampler, SequentialSampler, default_collate

    node = tn.ParallelMapper(tn.SamplerWrapper(BatchSampler(SequentialSampler(dataset), 8, False)),
                             map_fn=default_collate, num_workers=workers, method="thread")
    return tn.Loader(tn.Prefetcher(node, prefetch_factor=2 * workers))


def test_the_next_epoch_releases_the_last_one_s_threads_as_a_plain_loop_over_the_pipeline_does() -> None:
    # a plain `for batch in loader` over torchdata's pipeline stops and joins an epoch's threads when the next
    # epoch starts (up to 0.1 s a thread): the trial's loader must pay that too, not leave them to the garbage
    # collector (its thread configs measured 50-135% too fast on epochs of 8 batches: benchmarks/threads.py)
    plain = mappers_left(plain_pipeline(Tiny(64)))
    if not plain:
        pytest.skip("this torchdata's thread mapper is not _ParallelMapperIter")
    ours, _ = TorchBackend().build_loader(Tiny(64), LoaderConfig(2, prefetch_factor=2).as_threads(), 8, None, False,
                                          False)
    try:
        assert mappers_left(ours) == plain == 1
    finally:
        ours.shutdown()


def test_threads_do_not_load_an_iterable_dataset() -> None:
    with pytest.raises(TargetError, match="IterableDataset"):
        TorchBackend().build_loader(Stream(64), THREADS, 8, None, False, False)


def test_the_dataloaders_own_thread_workers_are_found_by_signature() -> None:
    assert thread_loader(["dataset", "num_workers", "worker_method"]) == "torch"
    assert thread_loader(["dataset", "num_workers"]) == "torchdata.nodes"


def test_without_torchdata_threads_are_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("torchdata") else real(name, *a))
    assert thread_loader(["dataset", "num_workers"]) is None
    with pytest.raises(TargetError, match="pip install torchdata"):
        TorchBackend().build_loader(Tiny(64), THREADS, 8, None, False, False)


def check(dataset: Any, config: LoaderConfig = THREADS, reference: Any = in_this_process) -> dict[str, Any]:
    """The thread check's last word; the one-by-one pass fetched here, first (a fork is a slow test's)."""
    events: list[dict[str, Any]] = []
    run_thread_check(TorchBackend(), dataset, None, config, 8, events.append, reference)
    return events[-1]


def test_the_thread_check_passes_a_thread_safe_dataset() -> None:
    word = check(Tiny(200))
    assert word["verdict"] == "same" and word["batches"] == 8  # two batches per thread


def test_the_thread_check_catches_a_shared_cursor() -> None:
    word = check(SharedCursor(200))
    assert word["verdict"] == "differs" and "indices" in word["detail"]


def test_the_thread_check_says_random_samples_cannot_be_compared() -> None:
    assert check(RandomSamples(200))["verdict"] == "unchecked"


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_batches_delivered_out_of_order_are_compared_by_their_indices() -> None:
    unordered = dataclasses.replace(THREADS, in_order=False)
    loader, _ = TorchBackend().build_loader(SlowBatches(64), unordered, 8, None, False, False)
    firsts = [batch[0, 0].item() for batch in loader]
    assert firsts != sorted(firsts)  # the slow batches came last: out of order
    word = check(SlowBatches(64), unordered)
    assert word["verdict"] == "same", word


def test_the_verdict_compares_what_the_same_indices_gave() -> None:
    indices = [[0, 1], [2, 3], [4, 5]]
    assert verdict([30, 10, 20], [10, 20, 30], [10, 20, 30], indices).verdict == "same"
    wrong = verdict([30, 10, 99], [10, 20, 30], [10, 20, 30], indices)
    assert wrong.verdict == "differs" and "indices 2, 3 (batch 1)" in wrong.detail
    assert verdict([10, 20], [10, 20, 30], [10, 20, 30], indices).verdict == "differs"  # a batch missing


@pytest.mark.slow
def test_a_racy_cache_is_caught_with_the_reference_fetched_in_a_fresh_copy() -> None:
    word = check(RacyCache(200), reference=in_a_fresh_copy)
    assert word["verdict"] == "differs", word
    assert check(Tiny(200), reference=in_a_fresh_copy)["verdict"] == "same"

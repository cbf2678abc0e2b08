"""The thread loader code the report prints runs as printed and loads the DataLoader's batches."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from dataprof.render.threads import thread_loader_code
from dataprof.results.knobs import LoaderConfig
from tests.fixtures.datasets import Tiny

THREADS = LoaderConfig(4, prefetch_factor=2).as_threads()


def test_the_torchdata_nodes_code_runs_as_printed() -> None:
    pytest.importorskip("torchdata.nodes")
    code = thread_loader_code(THREADS, 8, False, None, "torchdata.nodes", drop_last=False)
    names: dict[str, Any] = {"dataset": Tiny(100)}
    exec(code, names)  # noqa: S102  (the code a user pastes)
    printed = [batch[:, 0].tolist() for batch in names["loader"]]
    assert printed == [batch[:, 0].tolist() for batch in DataLoader(Tiny(100), batch_size=8)]
    assert "prefetch_factor=8" in code and 'method="thread"' in code  # 2 batches per thread, 4 threads


class Batched(Tiny):
    """A dataset that fetches a batch's samples at once (as Hugging Face datasets do), counting its calls."""

    calls = 0

    def __getitems__(self, indices: list[int]) -> list[Any]:
        Batched.calls += 1
        return [self[i] for i in indices]


def test_the_printed_pipeline_fetches_a_batch_at_once_where_the_dataset_can_as_the_measured_one_does() -> None:
    pytest.importorskip("torchdata.nodes")
    Batched.calls = 0
    code = thread_loader_code(THREADS, 8, False, None, "torchdata.nodes", getitems=True)
    names: dict[str, Any] = {"dataset": Batched(100)}
    exec(code, names)  # noqa: S102  (the code a user pastes)
    printed = [batch[:, 0].tolist() for batch in names["loader"]]
    assert printed == [batch[:, 0].tolist() for batch in DataLoader(Tiny(100), batch_size=8)]
    assert Batched.calls == 13  # 12 full batches and a short one, each fetched in one call


def test_the_dataloaders_own_thread_workers_are_one_line() -> None:
    line = thread_loader_code(THREADS, 8, True, "mypkg:collate", "torch")
    assert line == ('DataLoader(dataset, batch_size=8, shuffle=True, num_workers=4, prefetch_factor=2, '
                    'pin_memory=False, worker_method="thread", collate_fn=collate)')

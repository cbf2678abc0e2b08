"""What ``dataprof run --override`` and ``--replay`` do to a loader, without running a script."""

from __future__ import annotations

from typing import Any

import pytest

from dataprof.measure.watch.changes import Replay, overridden
from dataprof.results.run import RunChanges


class Loader:
    def __init__(self, dataset: Any, batch_size: int = 1, num_workers: int = 0, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, **rest: Any) -> None:
        self.args = dict(dataset=dataset, batch_size=batch_size, num_workers=num_workers,
                         prefetch_factor=prefetch_factor, persistent_workers=persistent_workers, **rest)


def test_the_knobs_given_are_set_and_the_rest_kept_as_the_script_passed_them() -> None:
    loader = Loader.__new__(Loader)
    values, threads = overridden(Loader.__init__, loader, ("data", 32, 4), {"persistent_workers": True, "tag": "x"},
                                 {"prefetch_factor": 4})
    assert values == {"dataset": "data", "batch_size": 32, "num_workers": 4, "persistent_workers": True,
                      "tag": "x", "prefetch_factor": 4}
    none, _ = overridden(Loader.__init__, loader, ("data",), {"num_workers": 4, "prefetch_factor": 2,
                                                              "persistent_workers": True}, {"num_workers": 0})
    assert none == {"dataset": "data", "num_workers": 0} and threads is None  # knobs that need workers: defaults


def test_thread_workers_leave_the_loader_none_of_its_own_or_take_its_worker_method(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torchdata.nodes")
    loader = Loader.__new__(Loader)
    knobs = {"worker_kind": "thread", "num_workers": 4, "prefetch_factor": 4}
    values, threads = overridden(Loader.__init__, loader, ("data", 32, 2), {"persistent_workers": True}, knobs)
    assert values == {"dataset": "data", "batch_size": 32}  # its own workers at the default: none
    assert threads is not None and threads.threads and (threads.num_workers, threads.prefetch_factor) == (4, 4)

    class Threaded(Loader):
        def __init__(self, dataset: Any, num_workers: int = 0, worker_method: str = "multiprocessing",
                     **rest: Any) -> None:
            super().__init__(dataset, num_workers=num_workers, worker_method=worker_method, **rest)

    values, threads = overridden(Threaded.__init__, Threaded.__new__(Threaded), ("data",), {}, knobs)
    assert threads is None and values == {"dataset": "data", "num_workers": 4, "prefetch_factor": 4,
                                          "worker_method": "thread"}  # the DataLoader's own thread workers
    monkeypatch.setattr("dataprof.measure.watch.changes.thread_loader", lambda arguments: None)
    with pytest.raises(TypeError, match="worker_kind=thread needs torchdata"):  # one line in the script's error
        overridden(Loader.__init__, loader, ("data",), {}, knobs)


def test_a_loader_is_changed_where_it_was_built_or_everywhere() -> None:
    assert RunChanges({"num_workers": 2}).applies("train.py:12")
    only = RunChanges({"num_workers": 2}, loader="train.py:12")
    assert only.applies("train.py:12") and only.applies("src/train.py:12")
    assert not only.applies("val.py:12") and not only.applies("src/mytrain.py:12")


def test_replay_keeps_the_first_batches_and_gives_them_again_to_the_epoch_s_length() -> None:
    replay = Replay(2, length=5)
    assert list(replay.epoch(iter(["a", "b", "c", "d", "e"]))) == ["a", "b", "a", "b", "a"]
    assert list(replay.epoch(None)) == ["a", "b", "a", "b", "a"]  # later epochs: the loader is not iterated
    endless = Replay(1, length=None).epoch(iter(["x"]))
    assert [next(endless) for _ in range(4)] == ["x"] * 4
    with pytest.raises(StopIteration):
        next(Replay(3, length=None).epoch(iter([])))  # an empty loader: nothing to replay


def test_each_replayed_batch_is_a_fresh_container_over_the_kept_tensors_and_an_epoch_has_a_length() -> None:
    import collections

    import torch

    Pair = collections.namedtuple("Pair", "images labels")
    image = torch.zeros(2)
    labels = [1, 2]
    batch = {"pixel_values": image, "labels": labels, "pair": Pair(image, (3,))}
    epoch = Replay(1, length=3).epoch(iter([batch, batch, batch]))
    assert len(epoch) == 3  # len(iter(loader)), as a DataLoader's iterator has it
    first = next(epoch)
    first.pop("labels")  # a step that pops a key, as HF models do
    first["pixel_values"] = first["pixel_values"] + 1  # or puts the moved tensor back in the dict
    again = next(epoch)
    assert set(again) == {"pixel_values", "labels", "pair"} and again["pixel_values"] is image
    assert again is not batch and again["labels"] is not labels and again["labels"] == [1, 2]
    assert type(again["pair"]) is Pair and again["pair"].images is image
    with pytest.raises(TypeError):
        len(Replay(1, length=None).epoch(iter([batch])))  # a stream has no length


def test_the_knobs_reach_a_dataloader_subclass_and_a_datamodule_s_loader() -> None:
    import torch
    import torch.utils.data.dataloader as module
    from torch.utils.data import DataLoader, TensorDataset

    from dataprof.measure.watch.watched import Recorder, patch_dataloader

    class Sink:
        def send(self, message: Any) -> None: ...

    class MyLoader(DataLoader):
        def __init__(self, dataset: Any, batch: int) -> None:
            super().__init__(dataset, batch_size=batch, shuffle=True)

    class DataModule:
        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4, num_workers=1)

    restore = patch_dataloader(module, Recorder(Sink(), max_steps=None, seconds=None),  # type: ignore[arg-type]
                               RunChanges({"num_workers": 2, "prefetch_factor": 4}))
    try:
        mine, theirs = MyLoader(TensorDataset(torch.zeros(8, 2)), batch=4), DataModule().train_dataloader()
    finally:
        restore()
    for loader in (mine, theirs):
        assert (loader.num_workers, loader.prefetch_factor, loader.batch_size) == (2, 4, 4)
    assert isinstance(mine.sampler, torch.utils.data.RandomSampler)  # the rest as the subclass passed it
    assert DataLoader(TensorDataset(torch.zeros(8, 2))).num_workers == 0  # put back as it was


def nodes_loader(workers: int = 4, depth: int = 8) -> Any:
    """A ``torchdata.nodes`` pipeline as a training script builds one: batches of 4 of 0..15 mapped by threads."""
    tn = pytest.importorskip("torchdata.nodes")
    from torch.utils.data import BatchSampler, SequentialSampler

    node = tn.SamplerWrapper(BatchSampler(SequentialSampler(range(16)), batch_size=4, drop_last=False))
    node = tn.ParallelMapper(node, map_fn=lambda batch: [2 * i for i in batch], num_workers=workers, method="thread")
    node = tn.Prefetcher(node, prefetch_factor=depth)
    return tn.Loader(node)


def test_a_torchdata_nodes_pipeline_takes_the_knobs_in_its_mapper_and_prefetcher() -> None:
    from dataprof.measure.watch.changes import nodes_knobs, override_nodes

    loader = nodes_loader()
    mapper = loader.root.source
    override_nodes(loader, {"num_workers": 2, "prefetch_factor": 3, "in_order": False, "pin_memory": False})
    assert loader.root.source is mapper and (mapper.num_workers, mapper.in_order) == (2, False)
    assert {k: nodes_knobs(loader)[k] for k in ("num_workers", "prefetch_factor", "worker_kind")} == \
        {"num_workers": 2, "prefetch_factor": 3, "worker_kind": "thread"}
    assert sorted(i for batch in loader for i in batch) == list(range(0, 32, 2))  # the same data, rebuilt mapper
    override_nodes(loader, {"worker_kind": "process", "multiprocessing_context": "spawn"})
    assert (mapper.method, mapper.multiprocessing_context, mapper.num_workers) == ("process", "spawn", 2)


@pytest.mark.parametrize(("knobs", "missing"), [({"persistent_workers": True}, "persistent_workers"),
                                                ({"pin_memory": True}, "pin_memory")])
def test_a_knob_a_torchdata_nodes_pipeline_has_no_place_for_is_one_line(knobs: dict[str, Any], missing: str) -> None:
    from dataprof.measure.watch.changes import override_nodes

    with pytest.raises(TypeError, match=f"^dataprof: this torchdata.nodes pipeline has no place for {missing}$"):
        override_nodes(nodes_loader(), knobs)


def test_an_override_the_script_undoes_after_construction_is_noted_and_only_the_tuned_split_is_changed() -> None:
    import torch
    import torch.utils.data.dataloader as module
    from torch.utils.data import TensorDataset

    from dataprof.measure.watch.recorder import Recorder
    from dataprof.measure.watch.watched import patch_dataloader

    class Sink:
        def send(self, message: Any) -> None: ...

    recorder = Recorder(Sink(), None, None)  # type: ignore[arg-type]
    restore = patch_dataloader(module, recorder, RunChanges({"num_workers": 0, "pin_memory": True}))
    try:
        loader = module.DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4, num_workers=2)
        assert (loader.num_workers, loader.pin_memory) == (0, True)
        loader.pin_memory = False  # the script's own setting after construction
        next(iter(loader))
    finally:
        restore()
    assert recorder.lost == {0: {"pin_memory": False}}
    tuned = RunChanges({"num_workers": 2}, loader="train.py:12", split="train")
    assert tuned.applies("train.py:12", "train") and not tuned.applies("train.py:12", "val")
    assert RunChanges({"num_workers": 2}, loader="train.py:12").applies("train.py:12", "val")


def test_the_replay_begins_at_the_first_batch_past_those_kept_when_the_training_stops_at_an_epoch_s_length() -> None:
    """Lightning's loop takes ``len(loader)`` batches an epoch and never asks past them: when the last kept batch
    ends an epoch, the replay begins with the next epoch's first batch."""
    began: list[int] = []
    replay = Replay(4, length=2, began=lambda: began.append(1))
    for epoch in range(3):
        batches = replay.epoch(iter([f"e{epoch}b0", f"e{epoch}b1"]) if len(replay.kept) < 4 else None)
        taken = [next(batches) for _ in range(2)]  # as many as the epoch's length, no StopIteration asked for
        assert began == ([] if epoch < 2 else [1]), epoch
        assert taken == (["e0b0", "e0b1"] if epoch == 0 else ["e1b0", "e1b1"] if epoch == 1 else ["e0b0", "e0b1"])
    later = replay.epoch(None)
    assert [next(later), next(later)] == ["e0b0", "e0b1"] and began == [1]  # once


def registered(loader: Any) -> Any:
    """What a run records of ``loader`` as built: its registration's record."""
    from dataprof.measure.watch.events import Factory
    from dataprof.measure.watch.recorder import Recorder
    from dataprof.measure.watch.sites import Origin

    class Sink:
        def send(self, message: Any) -> None: ...

    recorder = Recorder(Sink(), None, None)  # type: ignore[arg-type]
    return recorder.loaders[recorder.register(loader, Origin(None, "train.py:3"), Factory())]


def test_a_run_reads_the_knobs_its_record_has_no_field_for_off_the_loader_as_the_knob_records_say() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from dataprof.results.codec import decode, encode
    from dataprof.results.run import LoaderRun

    data = TensorDataset(torch.zeros(8, 2))
    unordered = registered(DataLoader(data, batch_size=4, num_workers=2, in_order=False))
    assert unordered.other_knobs == {"in_order": False}
    assert registered(DataLoader(data, batch_size=4, num_workers=2)).other_knobs == {}  # at its default: not said
    assert registered(DataLoader(data, batch_size=4, num_workers=0, in_order=False)).other_knobs == {}  # no workers
    figures = {"batches": 2, "epochs": 1, "steady_batches": 1, "samples_per_s": None, "data_wait_fraction": None,
               "wait_ms": None, "step_ms": None}
    written = encode(decode(LoaderRun, {**encode(unordered), **figures}))
    run = decode(LoaderRun, written)
    assert written["other_knobs"] == {"in_order": False} and run.knobs()["in_order"] is False
    names = list(run.knobs())
    assert names.index("in_order") < names.index("multiprocessing_context")  # in the records' order
    plain = encode(decode(LoaderRun, {**encode(registered(DataLoader(data, batch_size=4))), **figures}))
    assert "other_knobs" not in plain  # a document without them is as it was
    newer = decode(LoaderRun, {**written, "other_knobs": {"in_order": False, "future_knob": 3}})
    assert "future_knob" not in newer.knobs() and newer.knobs()["in_order"] is False


def test_a_torchdata_nodes_pipeline_says_its_mapper_s_order_as_a_dataloader_would() -> None:
    loader = nodes_loader()
    assert registered(loader).other_knobs == {}
    from dataprof.measure.watch.changes import override_nodes

    override_nodes(loader, {"in_order": False})
    assert registered(loader).other_knobs == {"in_order": False}


def test_what_a_torchdata_nodes_pipeline_is_set_to_it_reads_back_knob_by_knob() -> None:
    from dataprof.measure.watch.changes import nodes_knobs, override_nodes

    loader = nodes_loader()
    asked = {"num_workers": 3, "prefetch_factor": 3, "in_order": False, "worker_kind": "process",
             "multiprocessing_context": "spawn"}
    override_nodes(loader, asked)
    assert {name: nodes_knobs(loader)[name] for name in asked} == asked
    assert loader.root.prefetch_factor == 9  # the Prefetcher holds the depth of every worker's batches

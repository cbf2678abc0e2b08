"""Watching a training's DataLoaders: the same batches, each timed; the GPU sampled; the factory found."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import types
from typing import Any

import pytest

from dataprof.decide.run import judge
from dataprof.measure.protocol import Message
from dataprof.measure.watch.events import BuiltLoader, Device
from dataprof.measure.watch.watched import Recorder, WatchedIterator, patch_dataloader
from dataprof.results.run import LoaderRun, RunReport
from tests.conftest import run_report


class Sink:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.sent.append(message)


class FakeLoader:
    """A DataLoader's protocol, as a torch one would be patched."""

    def __init__(self, batches: list[Any], batch_size: int = 2) -> None:
        self.batches, self.batch_size, self.num_workers, self.dataset = batches, batch_size, 0, object()

    def __iter__(self) -> Any:
        return iter(self.batches)


def test_a_watched_loader_yields_the_same_batches_and_records_each() -> None:
    sink = Sink()
    recorder = Recorder(sink, max_steps=None, seconds=None)  # type: ignore[arg-type]
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    batches = [[1, 2], [3, 4], [5, 6]]
    loader = module.DataLoader(batches)
    assert list(loader) == batches and list(loader) == batches  # two epochs, unchanged
    recorder.flush()
    rows = [row for m in sink.sent if m["ev"] == "batches" for row in m["rows"]]
    assert [(row[0], row[1]) for row in rows] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert sink.sent[0]["ev"] == "loader"
    assert sink.sent[0]["info"]["site"].startswith("tests/measure/watch/test_watch.py:")
    assert isinstance(iter(loader), WatchedIterator)


def test_a_library_dataset_class_that_needs_arguments_is_told_from_one_a_sweep_can_build() -> None:
    from torch.utils.data import Dataset, TensorDataset

    from dataprof.measure.watch.recorder import _library

    assert _library(TensorDataset)  # torch's, built from the script's tensors
    assert not _library(Dataset)  # torch's, built from nothing
    assert not _library(FakeLoader)  # the project's own


def test_max_steps_ends_the_loop_from_inside() -> None:
    recorder = Recorder(Sink(), max_steps=2, seconds=None)  # type: ignore[arg-type]
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    taken = []
    with pytest.raises(BaseException, match="--max-steps 2"):
        for batch in module.DataLoader([[1], [2], [3], [4]]):
            taken.append(batch)
    assert taken == [[1], [2]]


def test_a_used_gpu_is_sampled_through_nvml_and_its_absence_said() -> None:
    from dataprof.measure.sampler import Sampler
    from dataprof.measure.watch import collector as watcher

    class FakeProbe:
        def sample(self, now: float) -> None:
            return None

    sampler = Sampler(FakeProbe(), FakeProbe(), FakeProbe())
    opened = []
    original = watcher.NvmlProbe.open
    watcher.NvmlProbe.open = lambda uuid, pci: opened.append(uuid) or "probe"  # type: ignore[assignment,method-assign]
    try:
        collector = watcher.Collector(watcher.SamplerMarks(sampler))
        collector.handle({"ev": "device", "device": "cuda:0", "uuid": "abc", "pci_bus_id": None, "name": "H200"})
    finally:
        watcher.NvmlProbe.open = original  # type: ignore[method-assign]
    assert opened == ["abc"] and sampler.gpu_probe == "probe" and collector.outcome.device == "cuda:0"
    assert watcher.gpu_note(collector.outcome) == ()
    assert "no CUDA device" in watcher.gpu_note(watcher.Outcome())[0]


def test_the_gpu_timeline_slices_the_watch_and_draws_in_the_terminal() -> None:
    from dataprof.measure.gpu import GpuSample
    from dataprof.measure.watch.resources import gpu_timeline
    from dataprof.render.documents import ConsoleRenderer

    render = ConsoleRenderer().render

    samples = [GpuSample(t=float(t), util_percent=[100.0 if t >= 50 else 0.0], memory_used_bytes=1) for t in range(100)]
    timeline = gpu_timeline(samples, slices=4)
    assert timeline == (0.0, 0.0, 100.0, 100.0)
    report = judge(run_report(0.3))
    shown = dataclasses.replace(report, resources=dataclasses.replace(report.resources, gpu_util_percent=50.0,
                                                                      gpu_timeline=timeline))
    assert "GPU utilisation over the watch (0–100%): ▁▁██ mean 50%" in render(shown)
    assert RunReport.from_dict(json.loads(shown.to_json())).resources.gpu_timeline == timeline
    assert "GPU utilisation over the watch" not in render(report)


def make_frame(length: int = 256, cfg: Any = None, name: str = "x") -> Any:
    """A module-level function: its frame is what a DataLoader built in it would see."""
    return sys._getframe()


def test_a_module_level_function_is_a_factory_with_its_literal_arguments() -> None:
    from dataprof.measure.watch.factory import loader_factory, still_running

    found = loader_factory(make_frame(300, name="y"))
    assert found.factory == f"{os.path.relpath(__file__)}:make_frame"
    assert found.factory_args == ("length=300", "name='y'") and found.factory_blocked is None
    blocked = loader_factory(make_frame(cfg=object()))
    assert blocked.factory_blocked == "its argument cfg is a object, which --arg cannot give"

    def nested() -> Any:
        return sys._getframe()

    assert loader_factory(nested()).factory is None
    assert still_running(sys._getframe()) and not still_running(make_frame())


class NoMarks:
    def mark_window_start(self) -> None: ...

    def mark_window_end(self) -> None: ...

    def use_gpu(self, device: Device) -> str | None:
        return None


def watched(loop: Any) -> dict[str, LoaderRun]:
    """Run ``loop(DataLoader, clock)`` on a fake clock; each loader's figures as the watch reports them."""
    from dataprof.measure.watch import collector as watcher
    from dataprof.measure.watch.loader_figures import loader_run

    now = [0.0]
    sink = Sink()
    recorder = Recorder(sink, max_steps=None, seconds=None, clock=lambda: now[0])  # type: ignore[arg-type]
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    loop(module.DataLoader, now)
    recorder.flush()
    collector = watcher.Collector(NoMarks())
    for message in sink.sent:
        collector.handle(message)
    loaders = list(collector.loaders.values())
    return {str(number): loader_run(one, [o for o in loaders if o is not one])
            for number, one in collector.loaders.items()}


def paces(loop: Any) -> dict[str, float | None]:
    """Each loader's pace as the watch reports it (:func:`watched`)."""
    return {loader: run.iterations_per_s for loader, run in watched(loop).items()}


def test_a_validation_pass_between_epochs_is_not_the_training_s_time() -> None:
    def train_then_validate(DataLoader: Any, now: list[float]) -> None:
        train, val = DataLoader([[i] for i in range(4)]), DataLoader([[i] for i in range(2)])
        for _ in range(3):
            for _ in train:
                now[0] += 0.1  # the step
            for _ in val:
                now[0] += 1.0  # a slow evaluation: two seconds an epoch
    assert paces(train_then_validate)["0"] == pytest.approx(10.0)  # 0.1 s a step; 3.9 with the validation in


def test_a_loader_iterated_beside_the_training_s_keeps_its_time() -> None:
    def zipped(DataLoader: Any, now: list[float]) -> None:
        images, captions = DataLoader([[i] for i in range(8)]), DataLoader([[i] for i in range(8)])
        for _ in range(2):
            for _ in zip(images, captions, strict=False):
                now[0] += 0.1
    assert paces(zipped)["0"] == pytest.approx(10.0)  # the other's epochs hold this one's batches: nothing left out


def starting(batches: int, now: list[float]) -> list[list[int]]:
    """``batches`` one-sample batches whose workers take 0.5 s on ``now``'s clock to start each epoch."""
    class Starting(list[list[int]]):
        def __iter__(self) -> Any:
            now[0] += 0.5
            yield from list.__iter__(self)

    return Starting([[i] for i in range(batches)])


def test_the_training_s_time_is_its_whole_epochs_from_their_workers_start_to_their_end() -> None:
    """As the training's own epoch log times it: each epoch from its workers' start to its end, a checkpoint
    between epochs left out, and a last epoch the window cut short not weighing its start against one batch."""
    def train_and_checkpoint(DataLoader: Any, now: list[float]) -> None:
        loader = DataLoader(starting(4, now))
        for epoch in range(5):
            for _ in loader:
                now[0] += 0.1  # the step
                if epoch == 4:
                    return  # the window ends one batch into the fifth epoch
            now[0] += 1.0  # a checkpoint after each epoch
    # epochs 2-4 whole: 4 batches in 0.5 + 4 × 0.1 s each; from the first batch past the warm-up to the last,
    # checkpoints in, it would be 14 / 7.4 s
    assert paces(train_and_checkpoint)["0"] == pytest.approx(4 / 0.9)


def test_a_long_epoch_the_window_cut_short_counts_its_batches_without_the_time_between_epochs() -> None:
    def one_epoch_and_most_of_the_next(DataLoader: Any, now: list[float]) -> None:
        loader = DataLoader(starting(20, now))
        for _ in loader:
            now[0] += 0.1
        now[0] += 1.0  # a checkpoint
        for index, _ in enumerate(loader):
            now[0] += 0.1
            if index == 18:
                return  # the window ends a batch short of the second epoch's end
    # the first epoch's rest holds fewer of the batches than the second's 19: from the first batch past the
    # warm-up to the last, its start in, the checkpoint out: 36 batches in 1.8 + 2.3 s
    assert paces(one_epoch_and_most_of_the_next)["0"] == pytest.approx(36 / 4.1)


def test_epochs_shorter_than_the_warm_up_are_timed_over_every_batch_past_the_start_up() -> None:
    def short_epochs(DataLoader: Any, now: list[float]) -> None:
        class Slow(list[list[int]]):  # each batch loads in 0.05 s
            def __iter__(self) -> Any:
                for batch in list.__iter__(self):
                    now[0] += 0.05
                    yield batch

        loader = DataLoader(Slow([[0], [1]]))  # two batches an epoch: never past num_workers=0's warm-up of 2
        for _ in range(5):
            for _ in loader:
                now[0] += 0.15  # the step
    run = watched(short_epochs)["0"]
    assert run.steady_batches == 4  # the second of each later epoch: what precedes an epoch's first is no step
    assert run.data_wait_fraction == pytest.approx(0.25) and run.step_ms is not None
    assert run.step_ms.p50 == pytest.approx(150.0) and run.iterations_per_s == pytest.approx(5.0)


def test_a_peek_at_one_batch_is_not_an_epoch_whose_end_opens_the_window() -> None:
    """``next(iter(loader))`` before the training (as PyTorch's CIFAR-10 tutorial does) makes a one-batch epoch:
    the window must not open at the next epoch's first batch, inside its workers' buffer, but past it."""
    def peek_then_train(DataLoader: Any, now: list[float]) -> None:
        class Buffered(list[list[int]]):  # the workers' buffer of 6 comes at once; then 0.2 s a batch
            def __iter__(self) -> Any:
                for number, batch in enumerate(list.__iter__(self)):
                    if number >= 6:
                        now[0] += 0.2
                    yield batch

        loader = DataLoader(Buffered([[i] for i in range(30)]))
        loader.num_workers, loader.prefetch_factor = 2, 2  # a warm-up of 2 × 2 + 2 = 6 batches an epoch
        next(iter(loader))
        for _ in range(2):
            for _ in loader:
                now[0] += 0.1  # the step
    run = watched(peek_then_train)["0"]
    # past the 6th batch of the first full epoch, the next epoch is whole: its 6 buffered at 0.1 s and 24 at 0.3 s,
    # as the training pays them and its own epoch log times them; from the first full epoch's first batch it
    # would be 59 / 15.4 s, the buffer counted as pace
    assert run.iterations_per_s == pytest.approx(30 / 7.8)


def test_a_loader_built_again_each_epoch_is_one_loader_whose_epochs_count_on() -> None:
    def rebuilt(DataLoader: Any, now: list[float]) -> None:
        for _ in range(3):
            for _ in DataLoader([[i] for i in range(6)]):  # the old one is gone when the next is iterated
                now[0] += 0.1
        beside = [DataLoader([[i] for i in range(4)]) for _ in range(2)]  # two alive at one line: two loaders
        for _ in zip(*beside, strict=True):
            now[0] += 0.1
    runs = watched(rebuilt)
    assert sorted((run.epochs, run.batches) for run in runs.values()) == [(1, 4), (1, 4), (3, 18)]
    assert runs["0"].epoch_samples == (6, 6, 6)  # each epoch's samples, as a stream's duplicates would show
    assert runs["0"].iterations_per_s == pytest.approx(10.0)  # every epoch's batches at the training's pace


def test_a_loader_whose_own_attributes_are_of_other_kinds_is_reported_with_those_not_known() -> None:
    import numpy

    class Odd(FakeLoader):
        def __init__(self, batches: list[Any]) -> None:
            super().__init__(batches, batch_size=numpy.int64(8))  # type: ignore[arg-type]
            self.pin_memory, self.num_workers = "yes", True  # a subclass's own attributes of its own kinds

    def loop(DataLoader: Any, now: list[float]) -> None:
        for _ in type("DataLoader", (Odd, DataLoader), {})([[i] for i in range(6)]):
            now[0] += 0.1
    run = watched(loop)["0"]
    assert (run.batch_size, run.pin_memory, run.num_workers, run.batches) == (8, None, None, 6)


def test_a_headspace_window_opens_when_the_replay_begins() -> None:
    from dataprof.results.run import RunChanges

    now = [0.0]
    recorder = Recorder(Sink(), max_steps=None, seconds=1.0, clock=lambda: now[0],  # type: ignore[arg-type]
                        from_first_batch=True, from_replay=True)

    class SlowLoader(FakeLoader):
        def __iter__(self) -> Any:
            for batch in self.batches:
                now[0] += 3.0  # a batch loads in 3 s: the two kept take longer than the window
                yield batch

    module = types.SimpleNamespace(DataLoader=type("DataLoader", (SlowLoader,), {}))
    patch_dataloader(module, recorder, RunChanges(replay=2))  # type: ignore[arg-type]
    taken = []
    with pytest.raises(BaseException, match="--seconds"):
        for _ in range(10):
            for batch in module.DataLoader([[i] for i in range(100)]):
                taken.append(batch)
                now[0] += 0.125
    assert len(taken) == 2 + 9  # the two kept, then 1 s of replayed 0.125 s steps; then the next call ends it
    assert recorder.replay_from == {0: 2}


def test_a_window_counted_from_the_first_batch_ignores_the_start_up() -> None:
    now = [0.0]
    recorder = Recorder(Sink(), max_steps=None, seconds=2.0, clock=lambda: now[0],  # type: ignore[arg-type]
                        from_first_batch=True)
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    now[0] = 30.0  # imports, the dataset built: longer than the window
    taken = []
    with pytest.raises(BaseException, match="--seconds"):
        for batch in module.DataLoader([[i] for i in range(100)]):
            taken.append(batch)
            now[0] += 0.1
    assert len(taken) == 21  # 2 s of 0.1 s steps after the first batch, then the next call ends it
    from_start = Recorder(Sink(), max_steps=None, seconds=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert from_start.deadline == now[0] + 2.0  # `run --seconds`: counted from the start


def test_ranks_end_at_the_batch_rank_0_names_whatever_their_own_clocks_say(tmp_path: Any) -> None:
    from dataprof.measure.watch.launched import Launched
    from dataprof.measure.watch.meeting import END_KEY, FolderMeeting
    from dataprof.measure.watch.ranks import MARGIN_BATCHES, RankEnd

    env = {"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job"}
    assert RankEnd.of({"WORLD_SIZE": "1", "RANK": "0"}) is None and RankEnd.of({"RANK": "0"}) is None
    assert RankEnd.of({**env, "RANK": "1"}).meeting.path == Launched(env).exchange_dir  # type: ignore[union-attr]
    path = tmp_path / END_KEY
    path.write_text("0 1")  # left by an earlier job of the same id
    os.utime(path, (time.time() - 60, time.time() - 60))
    meeting = FolderMeeting(tmp_path, since=time.time())
    clocks = [[0.0], [0.0]]
    recorders = [Recorder(Sink(), max_steps=None, seconds=1.0, clock=lambda c=c: c[0],  # type: ignore[arg-type]
                          from_first_batch=True, ranks=RankEnd(meeting, leader=rank == 0))
                 for rank, c in enumerate(clocks)]
    taken: list[list[int]] = [[], []]
    for index in range(100):  # in lockstep; rank 1's clock runs three times as fast as rank 0's
        for rank, recorder in enumerate(recorders):
            if recorder.ended is None:
                recorder.batches.setdefault(0, 0)
                recorder.pending.setdefault(0, [])
                recorder.batch(0, 1, index, 0.0, 0.01, 1)
                taken[rank].append(index)
                clocks[rank][0] += 0.1 * (3 if rank else 1)
    end = recorders[0].ranks.target  # type: ignore[union-attr]
    assert end is not None and 11 + MARGIN_BATCHES <= end[1] <= 12 + MARGIN_BATCHES  # rank 0's 1 s, the margin
    assert len(taken[0]) == len(taken[1]) == end[1]  # rank 1's own clock passed 1 s at its fourth batch
    assert recorders[1].ended == recorders[0].ended == "--seconds reached"
    alone = Recorder(Sink(), max_steps=3, seconds=1.0, ranks=RankEnd(meeting, leader=False))  # type: ignore[arg-type]
    assert alone.ranks is not None and Recorder(Sink(), max_steps=3, seconds=None,  # type: ignore[arg-type]
                                                ranks=RankEnd(meeting, leader=False)).ranks is None


def test_an_override_reaches_a_torchdata_nodes_loader_where_it_is_built() -> None:
    from dataprof.measure.watch.changes import nodes_knobs
    from dataprof.results.run import RunChanges
    from tests.measure.watch.test_changes import nodes_loader

    module = pytest.importorskip("torchdata.nodes.loader")
    recorder = Recorder(Sink(), max_steps=None, seconds=None)  # type: ignore[arg-type]
    restore = patch_dataloader(module, recorder, RunChanges({"num_workers": 2, "prefetch_factor": 4}))
    try:
        loader = nodes_loader(workers=4, depth=8)
    finally:
        restore()
    assert recorder.overridden == 1 and (nodes_knobs(loader)["num_workers"], loader.root.prefetch_factor) == (2, 8)
    assert (nodes_knobs(nodes_loader(workers=4))["num_workers"], recorder.overridden) == (4, 1)  # restored


def test_a_watched_torchdata_pipeline_releases_an_epoch_s_threads_when_the_next_starts_as_unwatched() -> None:
    # a watch that held the last epoch's pipeline past the next one's start would spare the script the joins it
    # pays unwatched: watched, it would run faster than alone
    from tests.backends.test_threads import mappers_left, plain_pipeline
    from tests.fixtures.datasets import Tiny

    module = pytest.importorskip("torchdata.nodes.loader")
    recorder = Recorder(Sink(), max_steps=None, seconds=None)  # type: ignore[arg-type]
    restore = patch_dataloader(module, recorder)
    try:
        loader = plain_pipeline(Tiny(64))
        left = mappers_left(loader)  # unwatched, one (tests/backends/test_threads.py)
        assert isinstance(iter(loader), WatchedIterator)
    finally:
        restore()
    if not left:
        pytest.skip("this torchdata's thread mapper is not _ParallelMapperIter")
    assert left == 1


def test_the_thread_pipeline_dataprof_builds_itself_is_not_overridden() -> None:
    from dataprof.backends.threads import NodesLoader
    from dataprof.results.knobs import LoaderConfig
    from dataprof.results.run import RunChanges

    module = pytest.importorskip("torchdata.nodes.loader")
    recorder = Recorder(Sink(), max_steps=None, seconds=None)  # type: ignore[arg-type]
    knobs = {"num_workers": 8, "persistent_workers": True, "worker_kind": "thread"}  # as --override gives them
    restore = patch_dataloader(module, recorder, RunChanges(knobs))
    try:
        built = NodesLoader(list(range(8)), [[0, 1], [2, 3]], list, LoaderConfig(2, False, 2, worker_kind="thread"))
    finally:
        restore()
    assert recorder.overridden == 0 and built.nodes[0].num_workers == 2  # the thread config it was given


def test_under_tune_an_evaluation_first_neither_opens_nor_ends_the_window() -> None:
    """A script that validates before it trains (a resumed run checking its checkpoint, HF's ``eval_on_start``):
    its validation batches, asked for under ``no_grad``, are not the training's; the window (``--trial-steps``,
    ``--trial-seconds`` from the first batch) counts the training loader's batches only."""
    import torch

    now = [0.0]
    sink = Sink()
    recorder = Recorder(sink, max_steps=5, seconds=2.0, clock=lambda: now[0],  # type: ignore[arg-type]
                        from_first_batch=True, training=(None, None))
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    val = module.DataLoader([[i] for i in range(40)])
    train = module.DataLoader([[i] for i in range(40)])
    with torch.no_grad():
        checked = [batch for batch in val for _ in [now.__setitem__(0, now[0] + 1.0)]]  # 40 s of validation
    assert len(checked) == 40 and recorder.ended is None and recorder.deadline is None
    assert not any(m["ev"] == "window_open" for m in sink.sent)
    taken = []
    with pytest.raises(BaseException, match="--max-steps 5"):
        for batch in train:
            taken.append(batch)
            now[0] += 0.1
    assert len(taken) == 5 and recorder.deadline == 40.0 + 2.0  # from the training's first batch
    assert [m["ev"] for m in sink.sent].count("window_open") == 1
    named = Recorder(Sink(), max_steps=3, seconds=None, training=("t.py:9", "train"))  # type: ignore[arg-type]
    built = BuiltLoader("t.py:9", "Data", "data", None, "DataLoader", "torch", 8, 0, None, False, False)
    named.loaders = {0: dataclasses.replace(built, split="val"), 1: dataclasses.replace(built, split="train")}
    assert not named.counts(0) and named.counts(1)  # HF builds both at one line: the split tells them apart

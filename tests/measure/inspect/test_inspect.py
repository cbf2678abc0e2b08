"""``dataprof inspect`` on datasets whose stage costs and slow indices are known by construction.

Assertions are on rankings, indices and structure, never on times.
"""

from __future__ import annotations

import pytest
import torch

from dataprof.decide.inspect import analyse
from dataprof.measure.inspect.batch import pickled_size
from dataprof.measure.inspect.samples import run_inspection, sample_order
from dataprof.measure.inspect.stages import timed_pipeline
from dataprof.results.inspect_data import InspectionData, InspectSettings
from tests.conftest import FIXTURES

STAGES = str(FIXTURES / "stages.py")


def inspect(attr: str, **kwargs: object) -> InspectionData:
    return run_inspection(InspectSettings(target=f"{STAGES}:{attr}", **kwargs))  # type: ignore[arg-type]


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_stages_are_ranked_by_their_known_cost_and_nesting_shows_as_a_tree() -> None:
    ins = analyse(inspect("Staged", samples=15, batch_size=4))
    assert [t.name for t in ins.transforms] == ["Heavy", "Medium", "Light", "Light"]
    assert [t.path for t in ins.transforms[:2]] == ["transform.transforms[1]",
                                                     "transform.transforms[2].transforms[0]"]
    assert all(t.calls == 15 for t in ins.transforms)
    (root,) = ins.tree
    assert root.name == "Compose"
    assert [child.name for child in root.children] == ["Light", "Heavy", "Compose"]
    assert [child.name for child in root.children[2].children] == ["Medium", "Light"]
    assert sum(t.share for t in ins.transforms) <= 1.0
    assert ins.outside_share is not None and ins.outside_share < ins.transforms[0].share
    assert ins.checks[0].id == "cpu_vs_wait" and "wait" in ins.checks[0].recommendation
    assert any(c.id == "dominant_stage" and "Heavy" in c.evidence for c in ins.checks)


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_stages_held_in_a_tuple_are_timed_too() -> None:
    ins = analyse(inspect("Staged", samples=10, batch_size=4, kwargs={"tuple_stages": True}))
    assert ins.transforms[0].name == "Heavy"


def test_the_pipeline_is_put_back_as_it_was() -> None:
    from tests.fixtures.stages import Staged

    dataset = Staged(4, tuple_stages=True)
    outer = dataset.transform
    before, inner_before = outer.transforms, list(outer.transforms[2].transforms)
    with timed_pipeline(dataset) as pipeline:
        dataset[0]
        assert outer.transforms is not before
        assert [leaf.calls for root in pipeline.roots for leaf in root.leaves()] == [1, 1, 1, 1]
    assert dataset.transform is outer and outer.transforms is before
    assert outer.transforms[2].transforms == inner_before


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_pipeline_found_on_a_wrapped_dataset() -> None:
    ins = analyse(inspect("Wrapper", samples=8, batch_size=4))
    assert ins.transforms[0].name == "Heavy"
    assert ins.transforms[0].path.startswith("dataset.transform")


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_slow_indices_are_named_and_found_slow_again() -> None:
    ins = analyse(inspect("SlowIndices", samples=60, batch_size=8))
    assert {s.index for s in ins.samples.slowest[:3]} == {3, 17, 42}
    straggle = next(c for c in ins.checks if c.id == "stragglers")
    assert "stay slow" in straggle.evidence and "expensive in themselves" in straggle.recommendation
    assert ins.transforms == () and "no transform" in ins.notes[0]


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_a_slow_moment_is_told_apart_from_a_slow_index() -> None:
    ins = analyse(inspect("ColdCache", samples=60, batch_size=8))
    assert {s.index for s in ins.samples.slowest[:2]} == {5, 30}
    straggle = next(c for c in ins.checks if c.id == "stragglers")
    assert "were fast" in straggle.evidence


def test_an_opaque_transform_is_timed_as_one_stage_and_said_so() -> None:
    ins = analyse(inspect("Opaque", samples=10, batch_size=4))
    assert [t.name for t in ins.transforms] == ["Heavy"]
    assert ins.notes[0].startswith("transform (Heavy) is not a Compose-like object")  # not "is a encode" for a function


def test_a_dataset_that_fetches_a_batch_at_once_is_timed_so_too() -> None:
    data = inspect("Batched", samples=20, batch_size=4)
    assert len(data.wall_s) == 20 and len(data.getitems_s) == len(data.getitems_cpu_s) == 5  # 20 samples, by 4
    assert analyse(data).batched_ms is not None
    assert inspect("Bare", samples=20, batch_size=4).getitems_s == ()


def test_iterable_dataset_times_the_first_items_in_stream_order() -> None:
    data = inspect("Counting", samples=20, batch_size=4)
    assert data.dataset.kind == "iterable" and data.indices == tuple(range(1, 21))
    ins = analyse(data)
    assert ins.samples.slowest[0].index == 7 and ins.samples.slowest[0].repeat_ms is None
    assert ins.transforms[0].name == "Light"


def test_iterable_shorter_than_asked_says_so() -> None:
    data = inspect("Counting", samples=100, batch_size=4, kwargs={"length": 30})
    assert len(data.wall_s) == 29 and "ended after" in (data.stopped or "")


def test_random_indices_are_reproducible_and_cover_small_datasets() -> None:
    assert sample_order(1000, 20, seed=1) == sample_order(1000, 20, seed=1)
    assert sample_order(1000, 20, seed=1) != sample_order(1000, 20, seed=2)
    assert sorted(sample_order(30, 200, seed=0)) == list(range(30))


def test_pickled_size_and_what_cannot_be_pickled() -> None:
    from tests.fixtures.stages import Bare, Staged

    size, seconds, error = pickled_size(Staged(4))
    assert size and size > 0 and seconds is not None and error is None
    size, _, error = pickled_size(Bare())
    assert size is None and error and "lambda" in error
    import pickle

    import numpy as np

    table = np.zeros(1 << 20, dtype=np.uint8)  # protocol 5 hands a large buffer over whole, as Arrow's tables are
    size, _, error = pickled_size(table)
    assert error is None and size == len(pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_type_dispatching_pipeline_gives_the_same_samples_under_inspect() -> None:
    from tests.fixtures.stages import CachedPipeline, LoadVolume, Transform

    plain = CachedPipeline()
    expected = [plain[i] for i in range(8)]
    dataset = CachedPipeline()
    with timed_pipeline(dataset) as pipeline:
        timed = [dataset[i] for i in range(8)]
        step = dataset.transform.transforms[0]
        assert isinstance(step, LoadVolume) and isinstance(step, Transform) and type(step).__name__ == "LoadVolume"
    assert all(torch.equal(a, b) for a, b in zip(expected, timed, strict=True))
    calls = {leaf.name: leaf.calls for root in pipeline.roots for leaf in root.leaves()}
    assert calls == {"LoadVolume": 0, "Scale": 0, "RandomShift": 8}  # the cached steps did not run again
    assert type(dataset.transform.transforms[0]) is LoadVolume  # put back
    data = inspect("CachedPipeline", samples=8, batch_size=4)
    assert not data.errors and len(data.wall_s) == 8


def test_functions_modules_and_built_in_objects_as_stages() -> None:
    import operator

    from tests.fixtures.stages import Compose

    class Holder(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.transform = Compose([abs, torch.nn.Identity(), operator.methodcaller("neg")])

        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> torch.Tensor:
            return self.transform(torch.full((2,), -float(index)))

    dataset = Holder()
    with timed_pipeline(dataset) as pipeline:
        assert torch.equal(dataset[3], torch.full((2,), -3.0))
    calls = {leaf.name: leaf.calls for root in pipeline.roots for leaf in root.leaves()}
    assert calls == {"abs": 1, "Identity": 1, "methodcaller": 0}  # a C type cannot change class: not timed
    assert pipeline.notes == ["transform.transforms[2] (methodcaller) cannot be timed without replacing it by an "
                              "object of another type, so it is not timed on its own: the sample's time includes it"]
    assert type(dataset.transform.transforms[1]) is torch.nn.Identity


def test_a_with_transform_function_is_timed_and_put_back() -> None:
    from tests.fixtures.stages import FormattedRows

    dataset = FormattedRows()
    original = dataset._format_kwargs["transform"]
    with timed_pipeline(dataset) as pipeline:
        for index in range(4):
            dataset[index]
    assert [root.path for root in pipeline.roots] == ["with_transform"]
    assert [(leaf.name, leaf.calls) for leaf in pipeline.roots[0].leaves()] == [("Heavy", 4), ("Light", 4)]
    assert dataset._format_kwargs["transform"] is original


@pytest.mark.slow
def test_each_costly_stage_is_measured_for_the_gil() -> None:
    from dataprof.measure.gil import usable_cpus

    ins = analyse(inspect("GilStaged", samples=12, batch_size=4))
    released = {t.name: t.gil_release for t in ins.transforms}
    assert set(released) == {"Sleep", "Spin", "NumpySort"}
    if usable_cpus() < 2:
        assert all(value is None for value in released.values())  # cannot be told on one CPU
        return
    # a busy machine may leave a stage's share untold (None: its pair of threads waited for CPUs), never a held
    # stage read as released (the one thread timed alone is timed less its own waits for a CPU)
    assert released["Sleep"] is not None and released["Sleep"] >= 0.6
    assert released["Spin"] is None or released["Spin"] <= 0.2
    assert ins.gil is not None and ins.gil.release is not None and ins.gil.calls >= 1


def test_a_loader_target_is_inspected_at_its_own_batch_size_and_prefetch_unless_told_others() -> None:
    import dataclasses

    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(100, 4)), batch_size=8, num_workers=2, prefetch_factor=4)
    settings = InspectSettings(target="train:loader", samples=30, dataset=loader)
    own = run_inspection(settings)
    assert (own.settings.batch_size, own.settings.prefetch_factor, own.dataset.batch_samples) == (8, 4, 8)
    told = run_inspection(dataclasses.replace(settings, batch_size=16, prefetch_factor=2))
    assert (told.settings.batch_size, told.settings.prefetch_factor, told.dataset.batch_samples) == (16, 2, 16)
    plain = run_inspection(dataclasses.replace(settings, dataset=TensorDataset(torch.zeros(100, 4))))
    assert (plain.settings.batch_size, plain.settings.prefetch_factor) == (64, 2)  # a dataset: the defaults

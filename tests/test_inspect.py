"""``dataprof inspect`` on datasets whose stage costs and slow indices are known by construction.

Assertions are on rankings, indices and structure, never on times.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from dataprof.cli import main
from dataprof.decide.inspect import analyse
from dataprof.measure.inspect.samples import InspectSettings, pickled_size, run_inspection, sample_order
from dataprof.measure.inspect.stages import timed_pipeline
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.inspect import InspectionData

STAGES = str(Path(__file__).parent / "fixtures" / "stages.py")


def inspect(attr: str, **kwargs: object) -> InspectionData:
    return run_inspection(InspectSettings(target=f"{STAGES}:{attr}", **kwargs))  # type: ignore[arg-type]


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["inspect", *args])
    return result.exit_code, result.stdout, result.stderr


def test_stages_are_ranked_by_their_known_cost_and_nesting_shows_as_a_tree() -> None:
    ins = analyse(inspect("Staged", samples=15, batch_size=4))
    assert [t["name"] for t in ins.transforms] == ["Heavy", "Medium", "Light", "Light"]
    assert [t["path"] for t in ins.transforms[:2]] == ["transform.transforms[1]",
                                                       "transform.transforms[2].transforms[0]"]
    assert all(t["calls"] == 15 for t in ins.transforms)
    (root,) = ins.tree
    assert root["name"] == "Compose"
    assert [child["name"] for child in root["children"]] == ["Light", "Heavy", "Compose"]
    assert [child["name"] for child in root["children"][2]["children"]] == ["Medium", "Light"]
    assert sum(t["share"] for t in ins.transforms) <= 1.0
    assert ins.outside_share is not None and ins.outside_share < ins.transforms[0]["share"]
    assert ins.checks[0].id == "cpu_vs_wait" and "wait" in ins.checks[0].recommendation
    assert any(c.id == "dominant_stage" and "Heavy" in c.evidence for c in ins.checks)


def test_stages_held_in_a_tuple_are_timed_too() -> None:
    ins = analyse(inspect("Staged", samples=10, batch_size=4, args=("tuple_stages=True",)))
    assert ins.transforms[0]["name"] == "Heavy"


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


def test_pipeline_found_on_a_wrapped_dataset() -> None:
    ins = analyse(inspect("Wrapper", samples=8, batch_size=4))
    assert ins.transforms[0]["name"] == "Heavy"
    assert ins.transforms[0]["path"].startswith("dataset.transform")


def test_slow_indices_are_named_and_found_slow_again() -> None:
    ins = analyse(inspect("SlowIndices", samples=60, batch_size=8))
    assert {s["index"] for s in ins.slowest[:3]} == {3, 17, 42}
    straggle = next(c for c in ins.checks if c.id == "stragglers")
    assert "stay slow" in straggle.evidence and "expensive in themselves" in straggle.recommendation
    assert ins.transforms == () and "no transform" in ins.data.pipeline_notes[0]


def test_a_slow_moment_is_told_apart_from_a_slow_index() -> None:
    ins = analyse(inspect("ColdCache", samples=60, batch_size=8))
    assert {s["index"] for s in ins.slowest[:2]} == {5, 30}
    straggle = next(c for c in ins.checks if c.id == "stragglers")
    assert "were fast" in straggle.evidence


def test_an_opaque_transform_is_timed_as_one_stage_and_said_so() -> None:
    ins = analyse(inspect("Opaque", samples=10, batch_size=4))
    assert [t["name"] for t in ins.transforms] == ["Heavy"]
    assert "not a Compose-like object" in ins.data.pipeline_notes[0]


def test_iterable_dataset_times_the_first_items_in_stream_order() -> None:
    data = inspect("Counting", samples=20, batch_size=4)
    assert data.dataset.kind == "iterable" and data.indices == tuple(range(1, 21))
    ins = analyse(data)
    assert ins.slowest[0]["index"] == 7 and ins.slowest[0]["repeat_ms"] is None
    assert ins.transforms[0]["name"] == "Light"


def test_iterable_shorter_than_asked_says_so() -> None:
    data = inspect("Counting", samples=100, batch_size=4, args=("length=30",))
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


def test_json_has_the_documented_keys(tmp_path: Path) -> None:
    out = tmp_path / "inspect.json"
    code, stdout, _ = cli(f"{STAGES}:SlowIndices", "--samples", "60", "--batch-size", "8", "--json", str(out))
    assert code == 0, stdout
    doc = json.loads(out.read_text())
    assert doc["tool"]["name"] == "dataprof" and doc["kind"] == "inspect"
    assert set(doc["samples"]["latency_ms"]) >= {"p50", "p95", "p99", "max"}
    assert doc["samples"]["slowest"][0]["index"] in (3, 17, 42)
    ms = [s["ms"] for s in doc["samples"]["slowest"]]
    assert ms == sorted(ms, reverse=True)
    assert doc["transforms"] == []
    assert doc["cpu_ceiling_samples_per_s"] > 0 and doc["bytes_per_sample"] == 16
    assert doc["bytes_per_batch"] == 8 * 16
    assert "Per sample" in stdout and "Checks" in stdout


def test_json_transforms_are_largest_share_first(tmp_path: Path) -> None:
    out = tmp_path / "inspect.json"
    code, _, _ = cli(f"{STAGES}:Staged", "--samples", "10", "--batch-size", "4", "--json", str(out))
    assert code == 0
    transforms = json.loads(out.read_text())["transforms"]
    assert [t["name"] for t in transforms][:2] == ["Heavy", "Medium"]
    assert all(set(t) >= {"name", "mean_ms", "share"} for t in transforms)


def test_a_raising_index_is_reported_and_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "inspect.json"
    code, stdout, stderr = cli(f"{STAGES}:RaisesAtFive", "--samples", "30", "--batch-size", "4", "--json", str(out))
    assert code == 3
    assert "dataset[5]" in stderr and "corrupt record 5" in stderr and "Traceback" not in stderr
    doc = json.loads(out.read_text())
    assert doc["samples"]["errors"][0]["index"] == 5 and doc["samples"]["count"] == 29
    assert "Per sample" in stdout


def test_samples_that_cannot_be_collated_exit_3() -> None:
    code, _, stderr = cli(f"{STAGES}:Ragged", "--samples", "10", "--batch-size", "4")
    assert code == 3 and "collating a batch failed" in stderr


@pytest.mark.parametrize("args, message", [
    (["nope.py:X"], "target file not found"),
    ([f"{STAGES}:Staged", "--samples", "0"], "--samples"),
    ([f"{STAGES}:Staged", "--arg", "bad"], "expected KEY=VALUE"),
])
def test_bad_input_is_one_line(args: list[str], message: str) -> None:
    code, _, stderr = cli(*args)
    assert code in (2, 3) and message in stderr and "Traceback" not in stderr


def synthetic(**changes: object) -> InspectionData:
    """A measured-looking inspection to vary one figure at a time."""
    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2", device="cpu", start_method="fork",
                      shm_free_bytes=1 << 30)
    data = InspectionData(
        target="x:y", tool_version="0", settings={"samples": 40, "seed": 0, "prefetch_factor": 2},
        environment=env,
        dataset=DatasetInfo(kind="map", type_name="D", length=100, init_s=0.0, sample="Tensor",
                            batch_samples=64, batch_bytes=1 << 20, batch_tensors=2, batch_objects=1),
        indices=tuple(range(40)), wall_s=(0.010,) * 40, cpu_s=(0.009,) * 40, sample_bytes=(16384,) * 40,
        collate_s=(0.001,), collate_cpu_s=(0.001,), pickle_bytes=1000, pickle_s=0.001,
        nofile_soft=1024, nofile_hard=4096, sharing_strategy="file_descriptor")
    return dataclasses.replace(data, **changes)  # type: ignore[arg-type]


def check(data: InspectionData, check_id: str):  # type: ignore[no-untyped-def]
    return next((c for c in analyse(data).checks if c.id == check_id), None)


def test_cpu_ceiling_is_usable_cpus_over_cpu_per_sample() -> None:
    ins = analyse(synthetic())
    per_sample = 0.009 + 0.001 / 64
    assert ins.cpu_ceiling == pytest.approx(2 / per_sample)
    assert "CPU work" in check(synthetic(), "cpu_vs_wait").recommendation
    waiting = synthetic(cpu_s=(0.001,) * 40)
    assert "mostly wait" in check(waiting, "cpu_vs_wait").recommendation


def test_shm_and_open_file_checks_warn_only_when_few_workers_fit() -> None:
    assert check(synthetic(), "shm_space").severity == "info"
    small = synthetic(environment=dataclasses.replace(synthetic().environment, shm_free_bytes=8 << 20))
    shm = check(small, "shm_space")
    assert shm.severity == "warning" and "3 workers fit" in shm.evidence
    assert check(synthetic(), "open_files").severity == "info"
    many = synthetic(dataset=dataclasses.replace(synthetic().dataset, batch_tensors=128))
    assert check(many, "open_files").severity == "warning"
    assert check(synthetic(sharing_strategy="file_system"), "open_files").severity == "info"


def stragglers_of(slow: dict[int, tuple[float, float]]) -> object:
    """Samples of 0.5 ms, but for ``index: (first ms, second ms)``."""
    wall = tuple(slow[i][0] / 1000 if i in slow else 0.0005 for i in range(40))
    return check(synthetic(wall_s=wall, repeat_s={i: again / 1000 for i, (_, again) in slow.items()}), "stragglers")


def test_slow_indices_are_told_apart_from_slow_moments_and_weighed_by_their_cost() -> None:
    # A busy machine adds slow moments to three truly slow indices: the indices still carry the advice.
    mixed = stragglers_of({3: (25, 25), 17: (25, 25), 30: (25, 24), 1: (3.4, 0.5), 9: (3.4, 0.5), 12: (3, 0.5)})
    assert "3 of 6 stay slow ([3], [17], [30]), and 3 of 6 were fast" in mixed.evidence
    assert "expensive in themselves" in mixed.recommendation and "slow moments" in mixed.recommendation
    # One mildly slow index among long slow moments: the moments carry it.
    moments = stragglers_of({3: (4, 4), 17: (25, 0.5), 30: (25, 0.6)})
    assert "1 of 3 stay slow ([3]), and 2 of 3 were fast" in moments.evidence
    assert "comes and goes" in moments.recommendation
    only = stragglers_of({3: (25, 25), 17: (25, 25)})
    assert "were fast" not in only.evidence and "slow moments" not in only.recommendation


def test_start_method_cost() -> None:
    assert "inherit" in check(synthetic(), "start_method").evidence
    spawn_env = dataclasses.replace(synthetic().environment, start_method="spawn")
    broken = synthetic(environment=spawn_env, pickle_bytes=None, pickle_error="PicklingError: lambda")
    assert check(broken, "start_method").severity == "critical"
    assert "persistent_workers" in check(synthetic(environment=spawn_env), "start_method").recommendation


def test_collate_share() -> None:
    assert check(synthetic(), "collate").severity == "info"
    assert check(synthetic(collate_s=(0.5,)), "collate").severity == "warning"


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

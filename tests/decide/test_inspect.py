"""``dataprof inspect``'s checks, each on a measured-looking inspection varied one figure at a time."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dataprof.decide.inspect import analyse
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.inspect import Inspection
from dataprof.results.inspect_data import InspectionData, InspectSettings


def synthetic(**changes: object) -> InspectionData:
    """A measured-looking inspection to vary one figure at a time."""
    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2", device="cpu", start_method="fork",
                      shm_free_bytes=1 << 30)
    data = InspectionData(
        target="x:y", tool_version="0", settings=InspectSettings("x:y", samples=40),
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
    threaded = check(synthetic(cpu_s=(0.0105,) * 40), "cpu_vs_wait")  # CPU past wall time: threads of its own
    assert "can only fill the 0% of each sample's time" in threaded.recommendation


def test_a_dataset_that_fetches_a_batch_at_once_is_costed_as_a_dataloader_fetches_it() -> None:
    # a Hugging Face dataset's __getitems__ reads a batch in one call, 10x cheaper a sample than one by one: the
    # ceiling and a worker's rate are the batch's (one by one, inspect told such a dataset a ceiling its w0 beat)
    batched = analyse(synthetic(getitems_s=(0.0010, 0.0011, 0.0012), getitems_cpu_s=(0.0009,) * 3))
    assert batched.batched_ms == pytest.approx(1.1)
    assert batched.cpu_ceiling == pytest.approx(2 / (0.0009 + 0.001 / 64))
    assert batched.worker_rate == pytest.approx(1 / (0.0011 + 0.001 / 64))
    assert batched.samples.latency_ms["mean"] == pytest.approx(10.0)  # the samples one by one, as they were
    plain = analyse(synthetic())
    assert plain.batched_ms is None and plain.worker_rate == pytest.approx(1 / (0.010 + 0.001 / 64))
    assert "batched_fetch_ms" not in json.loads(plain.to_json())
    assert Inspection.from_dict(json.loads(batched.to_json())).batched_ms == pytest.approx(1.1)


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


def test_a_stream_s_samples_are_named_by_how_it_gives_them() -> None:
    from dataprof.render.documents import ConsoleRenderer

    stream = synthetic(dataset=dataclasses.replace(synthetic().dataset, kind="iterable", length=None))
    text = ConsoleRenderer(120).render(analyse(stream))
    assert "Per sample (__next__)" in text and "slowest items (stream position)" in text
    assert "Per sample (__getitem__)" in ConsoleRenderer(120).render(analyse(synthetic()))

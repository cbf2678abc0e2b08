"""Measure one Dataset in this process: per sample, per transform stage, per batch.

Samples are fetched one at a time, as a DataLoader worker fetches them (torch
runs single-threaded here, as it does in a worker), so the CPU time of a
sample is the CPU one worker spends on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dataprof.backends.target import (
    build_dataset,
    describe_exception,
    load_collate,
    load_object,
    loader_framework,
)
from dataprof.errors import TargetError
from dataprof.measure.environment import cpu_budget, open_files_limit, pinned_cpus, pinned_to, probe_environment
from dataprof.measure.gil import release_share_apart
from dataprof.measure.inspect.batch import Collated, batched, collated, pickled_size
from dataprof.measure.inspect.reads import logged, storage_reads
from dataprof.measure.inspect.stages import Pipeline, Stage, timed_pipeline
from dataprof.results.environment import DatasetInfo
from dataprof.results.inspect_data import SLOWEST, InspectionData, InspectSettings, StageTiming, slowest_positions
from dataprof.results.threads import GilShare
from dataprof.results.vocabulary import DatasetKind
from dataprof.version import __version__


class Interrupted(Exception):
    """Ctrl-C while fetching samples; carries what was measured."""

    def __init__(self, data: InspectionData) -> None:
        super().__init__("interrupted")
        self.data = data


def freeze(stage: Stage) -> StageTiming:
    """A measured stage tree as immutable StageTiming data."""
    return StageTiming(name=stage.name, path=stage.path, seconds=stage.seconds, calls=stage.calls,
                       composite=stage.composite, children=tuple(freeze(child) for child in stage.children))


def sample_order(length: int | None, count: int, seed: int) -> list[int]:
    """A reproducible random sample of ``count`` indices (all of them, shuffled, for a small dataset)."""
    if length is None:
        return list(range(count))
    return random.Random(seed).sample(range(length), min(count, length))


class _Fetcher:
    """``fetch(i)`` for map-style datasets; the next item of one iterator for iterables."""

    def __init__(self, dataset: Any, kind: str) -> None:
        self.dataset = dataset
        self.kind = kind
        self.iterator: Iterator[Any] | None = None

    def fetch(self, index: int) -> Any:
        """Sample ``index`` of a map-style dataset, or the stream's next item."""
        if self.kind == DatasetKind.MAP:
            return self.dataset[index]
        if self.iterator is None:
            self.iterator = iter(self.dataset)
        return next(self.iterator)


@dataclass
class _Sampled:
    """What fetching the samples one by one gave."""

    indices: list[int] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)
    """The first samples, up to a batch, to collate."""
    stopped: str | None = None
    first_s: float | None = None
    described: str | None = None
    interrupted: bool = False


def _sample(fetcher: _Fetcher, order: list[int], settings: InspectSettings, pipeline: Pipeline) -> _Sampled:
    """The warm-up fetch (not counted), then each sample in ``order`` timed, until the budget runs out."""
    from dataprof.backends.common import describe_sample, footprint

    got = _Sampled()
    mapped = fetcher.kind == DatasetKind.MAP
    begin = time.perf_counter()
    try:
        try:
            got.first_s, first = _timed_fetch(fetcher, order[0] if mapped else 0)
            got.described = describe_sample(first)
        except StopIteration:
            raise TargetError("the dataset is empty: iterating it yields no sample") from None
        except Exception as exc:
            if not mapped:  # a map-style index that raises is recorded when the loop meets it
                got.errors.append((0, describe_exception(exc)))
        pipeline.reset()
        for index in order if mapped else range(1, settings.samples + 1):
            if time.perf_counter() - begin > settings.max_seconds:
                got.stopped = f"time budget of {settings.max_seconds:g} s reached"
                break
            try:
                cpu0 = time.process_time()
                seconds, sample = _timed_fetch(fetcher, index)
                cpu_s = time.process_time() - cpu0
            except StopIteration:
                got.stopped = f"the iterable ended after {index} items"
                break
            except Exception as exc:
                got.errors.append((index, describe_exception(exc)))
                continue
            got.indices.append(index)
            got.wall.append(seconds)
            got.cpu.append(cpu_s)
            got.sizes.append(footprint(sample)["bytes"])
            if got.described is None:
                got.described = describe_sample(sample)
            if len(got.kept) < settings.batch:
                got.kept.append(sample)
    except KeyboardInterrupt:
        got.interrupted, got.stopped = True, "interrupted"
    return got


def _build(settings: InspectSettings) -> tuple[Any, float, Any, InspectSettings]:
    """The dataset (the object given, or the target built: a DataLoader's or a DataModule's own), the seconds
    building took, the loader's collate function (None for a Dataset target), and ``settings`` with the batch size
    and prefetch it measures at: those given, else a DataLoader target's own, else 64 and 2."""
    start = time.perf_counter()
    made = settings.dataset
    if made is None:
        made = build_dataset(load_object(settings.target, settings.cwd), dict(settings.kwargs), settings.target)
    took = time.perf_counter() - start if settings.dataset is None else 0.0
    loader = made if loader_framework(made) is not None else None
    settings = dataclasses.replace(
        settings, batch_size=settings.batch_size or getattr(loader, "batch_size", None) or settings.batch,
        prefetch_factor=settings.prefetch_factor or getattr(loader, "prefetch_factor", None) or settings.prefetch)
    if loader is not None:
        return loader.dataset, took, getattr(loader, "collate_fn", None), settings
    return made, took, None, settings


def run_inspection(settings: InspectSettings) -> InspectionData:
    """Load the target and measure it (pinned to ``settings.cpus`` of this process's CPUs, when given). Raises
    TargetError when nothing could be measured; Interrupted on Ctrl-C."""
    with pinned_to(pinned_cpus(settings.cpus)):
        return _inspect(settings)


def _inspect(settings: InspectSettings) -> InspectionData:
    from dataprof.backends import detect_framework, get_backend
    from dataprof.backends.common import dataset_length

    dataset, init_s, own_collate, settings = _build(settings)
    backend = get_backend(detect_framework(dataset, settings.framework))
    collate = settings.collate or load_collate(settings.collate_fn, settings.cwd) or own_collate or \
        backend.default_collate()
    kind = backend.dataset_kind(dataset)
    length = dataset_length(dataset)
    if kind == DatasetKind.MAP and not length:
        raise TargetError("the dataset is empty (len() is 0): nothing to inspect")
    fetcher = _Fetcher(dataset, kind)
    threads = backend.get_threads()
    backend.set_threads(1)  # as in a DataLoader worker
    try:
        began = time.perf_counter()
        with logged() as first, timed_pipeline(dataset) as pipeline:
            order = sample_order(length if kind == DatasetKind.MAP else None, settings.samples, settings.seed)
            got = _sample(fetcher, order, settings, pipeline)
        took = time.perf_counter() - began
        stages = tuple(freeze(root) for root in pipeline.roots if root.total_calls() > 0)
        notes = list(pipeline.notes) + _pipeline_notes(pipeline, dataset)
        repeats = {} if kind != DatasetKind.MAP or got.interrupted else _refetch(fetcher, got.indices, got.wall)
        collation = collated(collate, got.kept) if got.kept and not got.interrupted else Collated()
        fetched = batched(dataset, got.indices, len(got.kept)) \
            if kind == DatasetKind.MAP and not got.interrupted else ((), ())
        again = fetcher.fetch if kind == DatasetKind.MAP else None
        storage = None if got.interrupted else storage_reads(first, len(got.wall) + 1, took, again, got.indices)
        gil, stages = (None, stages) if got.interrupted else gil_shares(fetcher, got.indices, pipeline, stages)
    finally:
        backend.set_threads(threads)
    if not got.wall and got.errors and not got.interrupted:
        index, message = got.errors[0]
        raise TargetError(f"every sample raised; dataset[{index}]: {message}")
    pickle_bytes, pickle_s, pickle_error = (None, None, None) if got.interrupted else pickled_size(dataset)
    soft, hard = open_files_limit()
    data = InspectionData(
        target=settings.target, tool_version=__version__, settings=settings,
        environment=probe_environment("cpu", budget=cpu_budget().pin(settings.cpus) if settings.cpus else None,
                                      start_method=multiprocessing.get_start_method(), framework=backend.name),
        dataset=DatasetInfo(kind=kind, type_name=type(dataset).__name__, length=length, init_s=init_s,
                            sample=got.described, batch_samples=len(got.kept) or None,
                            batch_bytes=collation.batch_bytes, batch_tensors=collation.batch_tensors,
                            batch_objects=collation.batch_objects),
        indices=tuple(got.indices), wall_s=tuple(got.wall), cpu_s=tuple(got.cpu), sample_bytes=tuple(got.sizes),
        first_s=got.first_s, errors=tuple(got.errors), repeat_s=repeats, stages=stages, pipeline_notes=tuple(notes),
        collate_s=collation.wall, collate_cpu_s=collation.cpu, collate_error=collation.error,
        getitems_s=fetched[0], getitems_cpu_s=fetched[1], pickle_bytes=pickle_bytes,
        pickle_s=pickle_s, pickle_error=pickle_error, stopped=got.stopped, nofile_soft=soft, nofile_hard=hard,
        sharing_strategy=backend.sharing_strategy(), storage=storage, gil=gil)
    if got.interrupted:
        raise Interrupted(data)
    return data


GIL_STAGE_SHARE = 0.05
"""Stages under this share of the timed stages' time are not measured for the GIL (their share cannot matter)."""
GIL_STAGES = 8
"""The costliest stages measured for the GIL, at most."""


def gil_shares(fetcher: _Fetcher, indices: list[int], pipeline: Pipeline,
               stages: tuple[StageTiming, ...]) -> tuple[GilShare | None, tuple[StageTiming, ...]]:
    """How much of a sample's fetch (a map-style dataset's) and of each costly stage releases the GIL: each
    timed alone, then with a second thread doing the same (``measure.gil``). A stage is replayed on its first
    call's arguments; one that raises on the replay is left unmeasured."""
    sample = None
    if fetcher.kind == DatasetKind.MAP and indices:
        with contextlib.suppress(Exception):
            sample = release_share_apart(fetcher.fetch, indices[:64])
    total = sum(stage.total_seconds() for root in pipeline.roots for stage in root.leaves()) or 1.0
    leaves = sorted((leaf for root in pipeline.roots for leaf in root.leaves() if leaf.replay is not None
                     and leaf.seconds / total >= GIL_STAGE_SHARE), key=lambda leaf: -leaf.seconds)[:GIL_STAGES]
    released: dict[str, float | None] = {}
    for leaf in leaves:
        try:
            released[leaf.path] = release_share_apart(lambda replay: replay(), [leaf.replay], budget_s=0.3).settled
        except Exception:
            continue
    return sample, tuple(_with_gil(stage, released) for stage in stages)


def _with_gil(stage: StageTiming, released: dict[str, float | None]) -> StageTiming:
    if stage.composite:
        return dataclasses.replace(stage, children=tuple(_with_gil(child, released) for child in stage.children))
    return dataclasses.replace(stage, gil_release=released.get(stage.path))


def _timed_fetch(fetcher: _Fetcher, index: int) -> tuple[float, Any]:
    start = time.perf_counter()
    sample = fetcher.fetch(index)
    return time.perf_counter() - start, sample


def _refetch(fetcher: _Fetcher, indices: list[int], wall: list[float]) -> dict[int, float]:
    """Fetch the slowest indices once more: a slow index stays slow, a slow moment does not."""
    again: dict[int, float] = {}
    for pos in slowest_positions(tuple(wall), SLOWEST):
        try:
            again[indices[pos]] = _timed_fetch(fetcher, indices[pos])[0]
        except Exception:
            continue
    return again


def _user_class(dataset: Any) -> bool:
    """Whether the dataset's class is the user's own code (not an installed library's, which it cannot change)."""
    module = sys.modules.get(type(dataset).__module__)
    path = getattr(module, "__file__", None) or ""
    return bool(path) and not any(part in path for part in ("site-packages", "dist-packages"))


def _pipeline_notes(pipeline: Pipeline, dataset: Any) -> list[str]:
    """Say plainly what could not be introspected."""
    if not pipeline.roots:
        note = (f"{type(dataset).__name__} has no transform, transforms or target_transform attribute, so "
                "only whole samples are timed")
        return [note + ("; hold the steps as self.transform = Compose([...]) to see each"
                        if _user_class(dataset) else "")]
    notes = []
    for root in pipeline.roots:
        if root.total_calls() == 0:
            notes.append(f"{root.path} ({root.name}) was never called while fetching samples")
        elif not root.composite:
            notes.append(f"{root.path} ({root.name}) is not a Compose-like object with a .transforms list, "
                         "so it is timed as one stage")
    return notes


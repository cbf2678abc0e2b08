"""Measure one Dataset in this process: per sample, per transform stage, per batch.

Samples are fetched one at a time, as a DataLoader worker fetches them (torch
runs single-threaded here, as it does in a worker), so the CPU time of a
sample is the CPU one worker spends on it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dataprof.errors import TargetError
from dataprof.inspection import SLOWEST, InspectionData, StageTiming, slowest_positions
from dataprof.measure.environment import open_files_limit, probe_environment
from dataprof.measure.stages import Pipeline, Stage, timed_pipeline
from dataprof.model import DatasetInfo
from dataprof.target import build_dataset, describe_exception, load_collate, load_object, parse_kwarg
from dataprof.version import __version__

COLLATE_REPEATS = 5
COLLATE_BUDGET_S = 2.0


@dataclass(frozen=True)
class InspectSettings:
    target: str
    args: tuple[str, ...] = ()
    samples: int = 200
    seed: int = 0
    batch_size: int = 64
    prefetch_factor: int = 2
    """For the /dev/shm and open-file checks: batches each worker keeps in flight."""
    max_seconds: float = 60.0
    """Stop fetching samples after this long."""
    collate_fn: str | None = None
    cwd: str = field(default_factory=os.getcwd)
    dataset: Any = None
    """A Dataset object (Python API); ``target`` is then only its name."""
    collate: Any = None
    """A collate callable (Python API), instead of ``collate_fn``."""
    framework: str = "auto"
    """Whose default collate and thread settings apply: ``auto`` (from the dataset), ``torch`` or ``paddle``."""

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "samples": self.samples, "seed": self.seed, "batch_size": self.batch_size,
                "prefetch_factor": self.prefetch_factor, "max_seconds": self.max_seconds,
                "collate_fn": self.collate_fn,
                "target_kwargs": {k: repr(v) for k, v in (parse_kwarg(a) for a in self.args)}}


class Interrupted(Exception):
    """Ctrl-C while fetching samples; carries what was measured."""

    def __init__(self, data: InspectionData) -> None:
        super().__init__("interrupted")
        self.data = data


class _CountingSink:
    """A write-only file that counts bytes, so pickling a large dataset never holds the bytes."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, chunk: bytes) -> int:
        self.size += len(chunk)
        return len(chunk)


def pickled_size(dataset: Any) -> tuple[int | None, float | None, str | None]:
    """Bytes and seconds to pickle the dataset (what spawn/forkserver send to every worker), or the error."""
    sink = _CountingSink()
    start = time.perf_counter()
    try:
        pickle.dump(dataset, sink, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return None, None, describe_exception(exc)
    return sink.size, time.perf_counter() - start, None


def freeze(stage: Stage) -> StageTiming:
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
        if self.kind == "map":
            return self.dataset[index]
        if self.iterator is None:
            self.iterator = iter(self.dataset)
        return next(self.iterator)


def run_inspection(settings: InspectSettings) -> InspectionData:
    """Load the target and measure it. Raises TargetError when nothing could be measured; Interrupted on Ctrl-C."""
    from dataprof.backends import detect_framework, get_backend
    from dataprof.backends.common import dataset_length, describe_sample, footprint

    start = time.perf_counter()
    if settings.dataset is not None:
        dataset = settings.dataset
    else:
        obj = load_object(settings.target, settings.cwd)
        dataset = build_dataset(obj, dict(parse_kwarg(item) for item in settings.args), settings.target)
    init_s = time.perf_counter() - start
    backend = get_backend(detect_framework(dataset, settings.framework))
    collate = settings.collate or load_collate(settings.collate_fn, settings.cwd) or backend.default_collate()
    kind = backend.dataset_kind(dataset)
    length = dataset_length(dataset)
    if kind == "map" and not length:
        raise TargetError("the dataset is empty (len() is 0): nothing to inspect")
    order = sample_order(length if kind == "map" else None, settings.samples, settings.seed)

    threads = backend.get_threads()
    backend.set_threads(1)  # as in a DataLoader worker
    fetcher = _Fetcher(dataset, kind)
    kept: list[Any] = []
    indices: list[int] = []
    wall: list[float] = []
    cpu: list[float] = []
    sizes: list[int] = []
    errors: list[tuple[int, str]] = []
    stopped: str | None = None
    first_s: float | None = None
    described: str | None = None
    pipeline: Pipeline | None = None
    interrupted = False
    try:
        with timed_pipeline(dataset) as pipeline:
            begin = time.perf_counter()
            positions = order if kind == "map" else range(1, settings.samples + 1)
            try:
                try:
                    first_s, first = _timed_fetch(fetcher, order[0] if kind == "map" else 0)
                    described = describe_sample(first)
                except StopIteration:
                    raise TargetError("the dataset is empty: iterating it yields no sample") from None
                except Exception as exc:
                    if kind != "map":  # a map-style index that raises is recorded when the loop meets it
                        errors.append((0, describe_exception(exc)))
                pipeline.reset()
                for index in positions:
                    if time.perf_counter() - begin > settings.max_seconds:
                        stopped = f"time budget of {settings.max_seconds:g} s reached"
                        break
                    try:
                        cpu0 = time.process_time()
                        seconds, sample = _timed_fetch(fetcher, index)
                        cpu_s = time.process_time() - cpu0
                    except StopIteration:
                        stopped = f"the iterable ended after {index} items"
                        break
                    except Exception as exc:
                        errors.append((index, describe_exception(exc)))
                        continue
                    indices.append(index)
                    wall.append(seconds)
                    cpu.append(cpu_s)
                    sizes.append(footprint(sample)["bytes"])
                    if described is None:
                        described = describe_sample(sample)
                    if len(kept) < settings.batch_size:
                        kept.append(sample)
            except KeyboardInterrupt:
                interrupted, stopped = True, "interrupted"
        stages = tuple(freeze(root) for root in pipeline.roots if root.total_calls() > 0)
        notes = list(pipeline.notes) + _pipeline_notes(pipeline, dataset)
        repeats = {} if kind != "map" or interrupted else _refetch(fetcher, indices, wall)
        collated = _collate(collate, kept) if kept and not interrupted else {}
    finally:
        backend.set_threads(threads)
    if not wall and errors and not interrupted:
        index, message = errors[0]
        raise TargetError(f"every sample raised; dataset[{index}]: {message}")
    pickle_bytes, pickle_s, pickle_error = (None, None, None) if interrupted else pickled_size(dataset)
    soft, hard = open_files_limit()
    environment = probe_environment("cpu", start_method=multiprocessing.get_start_method(), framework=backend.name)
    data = InspectionData(
        target=settings.target, tool_version=__version__, settings=settings.to_dict(),
        environment=environment,
        dataset=DatasetInfo(kind=kind, type_name=type(dataset).__name__, length=length, init_s=init_s,
                            sample=described, batch_samples=len(kept) or None,
                            batch_bytes=collated.get("bytes"), batch_tensors=collated.get("tensors"),
                            batch_objects=collated.get("objects")),
        indices=tuple(indices), wall_s=tuple(wall), cpu_s=tuple(cpu), sample_bytes=tuple(sizes),
        first_s=first_s, errors=tuple(errors), repeat_s=repeats, stages=stages, pipeline_notes=tuple(notes),
        collate_s=tuple(collated.get("wall", ())), collate_cpu_s=tuple(collated.get("cpu", ())),
        collate_error=collated.get("error"), pickle_bytes=pickle_bytes, pickle_s=pickle_s,
        pickle_error=pickle_error, stopped=stopped, nofile_soft=soft, nofile_hard=hard,
        sharing_strategy=backend.sharing_strategy())
    if interrupted:
        raise Interrupted(data)
    return data


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


def _collate(collate: Callable[[list[Any]], Any], samples: list[Any]) -> dict[str, Any]:
    """Collate the kept samples a few times (median is used), and weigh the batch."""
    from dataprof.backends.common import footprint

    wall: list[float] = []
    cpu: list[float] = []
    batch: Any = None
    begin = time.perf_counter()
    while len(wall) < COLLATE_REPEATS and (not wall or time.perf_counter() - begin < COLLATE_BUDGET_S):
        cpu0, start = time.process_time(), time.perf_counter()
        try:
            batch = collate(samples)
        except Exception as exc:
            return {"error": describe_exception(exc)}
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu0)
    return {"wall": wall, "cpu": cpu, **footprint(batch)}


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
            notes.append(f"{root.path} is a {root.name}, not a Compose-like object with a .transforms list, "
                         "so it is timed as one stage")
    return notes


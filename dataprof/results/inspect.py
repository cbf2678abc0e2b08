"""``dataprof inspect``'s data: what one Dataset costs per sample, per stage, per batch. Stdlib only.

:class:`~dataprof.results.inspect_data.InspectionData` is what the measurement produced;
``decide.inspect.analyse`` derives from it the :class:`Inspection` document every renderer reads, which its JSON
holds whole (``from_dict`` reads it back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataprof.results.cache import StorageReads
from dataprof.results.codec import FLAT, HIDDEN, decode, encode, named, objects, view, written_if
from dataprof.results.document import SETTINGS_KEYS, Document, settings_view
from dataprof.results.environment import DatasetInfo
from dataprof.results.findings import Finding
from dataprof.results.inspect_data import InspectionData, InspectSettings
from dataprof.results.threads import GilShare
from dataprof.results.vocabulary import Framework, Kind


@dataclass(frozen=True)
class TimedStage:
    """One stage of the transform tree as timed in place: its time per sample, its share of the sample's time;
    a stage of its own (a leaf) with its calls and how much of its time released the GIL, a composite with its
    children."""

    name: str
    path: str
    """Where it sits, e.g. ``transform.transforms[2]``."""
    mean_ms: float
    share: float | None
    calls: int | None = field(default=None, metadata=written_if(lambda stage: stage.children is None))
    gil_release: float | None = field(default=None, metadata=written_if(lambda stage: stage.children is None))
    children: tuple[TimedStage, ...] | None = field(default=None,
                                                    metadata=written_if(lambda stage: stage.children is not None))


@dataclass(frozen=True)
class SlowSample:
    """One of the slowest samples: its index (a stream's position), its time, and its time fetched again (None:
    not fetched again)."""

    index: int
    ms: float
    repeat_ms: float | None


@dataclass(frozen=True)
class InspectedMachine:
    """The machine an inspection ran on, as its document holds it (the ``environment`` block)."""

    cpu_count: int
    usable_cpus: int
    cpu_reason: str
    ram_bytes: int
    python: str
    torch: str | None
    platform: str
    start_method: str | None
    shm_free_bytes: int | None
    open_files_limit: int | None
    """Soft RLIMIT_NOFILE."""
    open_files_hard_limit: int | None
    sharing_strategy: str | None
    """torch.multiprocessing's strategy: ``file_descriptor`` keeps one open file per tensor in flight."""
    framework: str
    paddle: str | None

    @property
    def framework_version(self) -> str | None:
        """The inspected framework's version."""
        return self.paddle if self.framework == Framework.PADDLE else self.torch

    @classmethod
    def of(cls, data: InspectionData) -> InspectedMachine:
        """What an inspection's measurements say of the machine."""
        env = data.environment
        return cls(cpu_count=env.cpu_count, usable_cpus=env.usable_cpus, cpu_reason=env.cpu_reason,
                   ram_bytes=env.ram_bytes, python=env.python, torch=env.torch, platform=env.platform,
                   start_method=env.start_method, shm_free_bytes=env.shm_free_bytes,
                   open_files_limit=data.nofile_soft, open_files_hard_limit=data.nofile_hard,
                   sharing_strategy=data.sharing_strategy, framework=env.framework, paddle=env.paddle)


@dataclass(frozen=True)
class InspectedSamples:
    """The samples an inspection timed, as its document holds them (the ``samples`` block)."""

    count: int
    requested: int | None
    stopped: str | None
    """Why fewer samples than asked were measured, if so."""
    first_ms: float | None
    """The warm-up fetch (lazy opens, caches), not counted in the statistics."""
    latency_ms: dict[str, float]
    """``p50``, ``p95``, ``p99``, ``max``, ``mean`` wall time per sample; empty without samples."""
    cpu_ms_mean: float | None
    cpu_share: float | None
    """CPU time over wall time of a sample (1.0: pure computation)."""
    slowest: tuple[SlowSample, ...]
    """The slowest samples, slowest first."""
    errors: tuple[tuple[int, str], ...] = field(metadata=objects("index", "error"))
    kind: str | None = field(default=None, metadata=HIDDEN)
    """``computing``, ``waiting`` or ``mixed``, by the thresholds of the cpu_vs_wait check; None without samples
    (and in documents written before it was saved)."""


def _dataset_json(doc: Inspection) -> dict[str, Any]:
    """The ``dataset`` block, and its first batch's figures at the top level (as the first document had them)."""
    ds = doc.dataset
    return {"dataset": {"kind": ds.kind, "type": ds.type_name, "length": ds.length, "init_s": ds.init_s,
                        "sample": ds.sample},
            "bytes_per_batch": ds.batch_bytes, "batch_samples": ds.batch_samples,
            "batch_tensors": ds.batch_tensors, "batch_objects": ds.batch_objects}


def _dataset_from(data: Mapping[str, Any]) -> DatasetInfo:
    ds = data["dataset"]
    return DatasetInfo(kind=ds["kind"], type_name=ds["type"], length=ds["length"], init_s=ds["init_s"],
                       sample=ds["sample"], batch_samples=data["batch_samples"], batch_bytes=data["bytes_per_batch"],
                       batch_tensors=data["batch_tensors"], batch_objects=data["batch_objects"])


def _notes_from(data: Mapping[str, Any]) -> tuple[str, ...]:
    note = data.get("transforms_note")  # documents before the notes were a list
    return tuple(data.get("transforms_notes", [note] if note else []))


def _outside_share_from(data: Mapping[str, Any]) -> float | None:
    if "outside_transforms_share" in data:
        return data["outside_transforms_share"]  # type: ignore[no-any-return]
    return _share(data["outside_transforms_ms"], data["samples"]["latency_ms"])


@dataclass(frozen=True)
class Inspection(Document):
    """``dataprof inspect``'s document: every figure and check its reports show, derived from
    :class:`InspectionData` (``decide.inspect.analyse``) or read back from its JSON (docs/inspect.md)."""

    KIND: ClassVar[str | None] = Kind.INSPECT
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "target", "settings", "environment", "dataset", "samples", "transforms", "transform_tree", "transforms_note",
        "outside_transforms_ms", "collate_ms", "collate_error", "bytes_per_sample", "bytes_per_batch",
        "batch_samples", "batch_tensors", "batch_objects", "pickled_dataset_bytes", "pickle_s", "pickle_error",
        "cpu_s_per_sample", "cpu_ceiling_samples_per_s", "worker_samples_per_s", "batched_fetch_ms", "max_workers_shm",
        "max_workers_open_files", "checks", "sample_kind", "transforms_notes", "outside_transforms_share",
        "storage", "gil")
    target: str
    tool_version: str = field(metadata=HIDDEN)
    settings: InspectSettings = field(metadata=settings_view(InspectSettings))
    environment: InspectedMachine
    dataset: DatasetInfo = field(metadata={**FLAT, **view(_dataset_json, _dataset_from)})
    samples: InspectedSamples = field(metadata={**FLAT, **view(
        lambda doc: {"samples": encode(doc.samples), "sample_kind": doc.samples.kind},
        lambda data: decode(InspectedSamples, {**data["samples"], "kind": data.get("sample_kind")}))})
    transforms: tuple[TimedStage, ...]
    """The stages of their own (the tree's leaves), costliest first."""
    tree: tuple[TimedStage, ...] = field(metadata=named("transform_tree"))
    """The transform tree as found."""
    notes: tuple[str, ...] = field(metadata={**FLAT, **view(
        lambda doc: {"transforms_notes": list(doc.notes), "transforms_note": "; ".join(doc.notes) or None},
        _notes_from)})
    """What the pipeline search says of the pipeline (an opaque transform, a wrapped dataset)."""
    outside_ms: float | None = field(metadata=named("outside_transforms_ms"))
    outside_share: float | None = field(metadata=view(read=_outside_share_from, **named("outside_transforms_share")))
    """Time per sample in ``__getitem__`` outside the timed stages, and its share."""
    collate_ms: float | None
    collate_error: str | None
    bytes_per_sample: float | None
    pickle_bytes: int | None = field(metadata=named("pickled_dataset_bytes"))
    pickle_s: float | None
    pickle_error: str | None
    cpu_s_per_sample: float | None
    cpu_ceiling: float | None = field(metadata=named("cpu_ceiling_samples_per_s"))
    worker_rate: float | None = field(metadata=named("worker_samples_per_s"))
    """Samples/s one worker delivers at the measured wall time per sample (fetched a batch at once where the dataset
    can: :attr:`batched_ms`)."""
    max_workers_shm: int | None
    max_workers_files: int | None = field(metadata=named("max_workers_open_files"))
    checks: tuple[Finding, ...] = ()
    storage: StorageReads | None = None
    gil: GilShare | None = None
    """How much of a sample's fetch releases the GIL, and so what threads can do with it."""
    batched_ms: float | None = field(default=None, metadata={
        **named("batched_fetch_ms"), **written_if(lambda ins: ins.batched_ms is not None)})
    """A dataset that fetches a batch's samples at once (``__getitems__``, as a DataLoader then fetches them): the
    median time per sample of such a batch; the CPU figures, the ceiling and a worker's rate are then the batch's.
    None for a dataset without it."""
    settings_keys: tuple[str, ...] | None = field(default=None, metadata=SETTINGS_KEYS)
    """The ``settings`` keys of the document this was read from (:func:`~dataprof.results.document.kept`)."""


def _share(outside_ms: float | None, latency_ms: dict[str, float]) -> float | None:
    """The share of a sample's time spent outside its timed stages (documents before it was saved)."""
    return outside_ms / latency_ms["mean"] if outside_ms is not None and latency_ms.get("mean") else None

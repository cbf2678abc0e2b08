"""``dataprof inspect``'s data: what one Dataset costs per sample, per stage, per batch. Stdlib only.

:class:`~dataprof.results.inspect_data.InspectionData` is what the measurement produced;
``decide.inspect.analyse`` derives from it the :class:`Inspection` document every renderer reads, which its JSON
holds whole (``from_dict`` reads it back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataprof.results.cache import StorageReads
from dataprof.results.codec import HIDDEN, decode, encode, objects, optional, records
from dataprof.results.document import SCHEMA_VERSION, Document, kept, tool, version_of
from dataprof.results.environment import DatasetInfo
from dataprof.results.findings import Finding
from dataprof.results.inspect_data import InspectionData, InspectSettings
from dataprof.results.threads import GilShare
from dataprof.results.vocabulary import Framework, Kind


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
    slowest: tuple[dict[str, Any], ...]
    """``index``, ``ms`` and ``repeat_ms`` (the second fetch) of the slowest samples, slowest first."""
    errors: tuple[tuple[int, str], ...] = field(metadata=objects("index", "error"))
    kind: str | None = field(default=None, metadata=HIDDEN)
    """``computing``, ``waiting`` or ``mixed``, by the thresholds of the cpu_vs_wait check; None without samples
    (and in documents written before it was saved)."""


@dataclass(frozen=True)
class Inspection(Document):
    """``dataprof inspect``'s document: every figure and check its reports show, derived from
    :class:`InspectionData` (``decide.inspect.analyse``) or read back from its JSON."""

    target: str
    tool_version: str
    settings: InspectSettings
    environment: InspectedMachine
    dataset: DatasetInfo
    samples: InspectedSamples
    transforms: tuple[dict[str, Any], ...]
    """The timed stages, costliest first: ``name``, ``path``, ``mean_ms``, ``share``, ``calls``."""
    tree: tuple[dict[str, Any], ...]
    """The transform tree as found, each node with its ``mean_ms`` and ``share`` (composites their children)."""
    notes: tuple[str, ...]
    """What the pipeline search says of the pipeline (an opaque transform, a wrapped dataset)."""
    outside_ms: float | None
    outside_share: float | None
    """Time per sample in ``__getitem__`` outside the timed stages, and its share."""
    collate_ms: float | None
    collate_error: str | None
    bytes_per_sample: float | None
    pickle_bytes: int | None
    pickle_s: float | None
    pickle_error: str | None
    cpu_s_per_sample: float | None
    cpu_ceiling: float | None
    worker_rate: float | None
    """Samples/s one worker delivers at the measured wall time per sample."""
    max_workers_shm: int | None
    max_workers_files: int | None
    checks: tuple[Finding, ...] = ()
    storage: StorageReads | None = None
    gil: GilShare | None = None
    """How much of a sample's fetch releases the GIL, and so what threads can do with it."""
    settings_keys: tuple[str, ...] | None = None
    """The ``settings`` keys of the document this was read from (:func:`~dataprof.results.document.kept`)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``dataprof inspect --json`` document (docs/inspect.md)."""
        ds, samples = self.dataset, self.samples
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": tool(self.tool_version),
            "kind": Kind.INSPECT,
            "target": self.target,
            "settings": kept(encode(self.settings), self.settings_keys),
            "environment": encode(self.environment),
            "dataset": {"kind": ds.kind, "type": ds.type_name, "length": ds.length, "init_s": ds.init_s,
                        "sample": ds.sample},
            "samples": encode(samples),
            "transforms": list(self.transforms),
            "transform_tree": list(self.tree),
            "transforms_note": "; ".join(self.notes) or None,
            "outside_transforms_ms": self.outside_ms,
            "collate_ms": self.collate_ms,
            "collate_error": self.collate_error,
            "bytes_per_sample": self.bytes_per_sample,
            "bytes_per_batch": ds.batch_bytes,
            "batch_samples": ds.batch_samples,
            "batch_tensors": ds.batch_tensors,
            "batch_objects": ds.batch_objects,
            "pickled_dataset_bytes": self.pickle_bytes,
            "pickle_s": self.pickle_s,
            "pickle_error": self.pickle_error,
            "cpu_s_per_sample": self.cpu_s_per_sample,
            "cpu_ceiling_samples_per_s": self.cpu_ceiling,
            "worker_samples_per_s": self.worker_rate,
            "max_workers_shm": self.max_workers_shm,
            "max_workers_open_files": self.max_workers_files,
            "checks": encode(self.checks),
            "sample_kind": samples.kind,
            "transforms_notes": list(self.notes),
            "outside_transforms_share": self.outside_share,
            "storage": encode(self.storage),
            "gil": encode(self.gil),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Inspection:
        """Read :meth:`to_dict` back (the keys added later are optional)."""
        ds, samples = data["dataset"], data["samples"]
        note = data.get("transforms_note")
        return cls(
            target=data["target"], tool_version=version_of(data),
            settings=decode(InspectSettings, {**(data.get("settings") or {}), "target": data["target"]}),
            settings_keys=tuple(data.get("settings") or {}), environment=decode(InspectedMachine, data["environment"]),
            dataset=DatasetInfo(kind=ds["kind"], type_name=ds["type"], length=ds["length"], init_s=ds["init_s"],
                                sample=ds["sample"], batch_samples=data["batch_samples"],
                                batch_bytes=data["bytes_per_batch"], batch_tensors=data["batch_tensors"],
                                batch_objects=data["batch_objects"]),
            samples=decode(InspectedSamples, {**samples, "kind": data.get("sample_kind")}),
            transforms=tuple(data["transforms"]), tree=tuple(data["transform_tree"]),
            notes=tuple(data.get("transforms_notes", [note] if note else [])),
            outside_ms=data["outside_transforms_ms"], outside_share=data.get("outside_transforms_share",
                                                                             _share(data["outside_transforms_ms"],
                                                                                    samples["latency_ms"])),
            collate_ms=data["collate_ms"], collate_error=data["collate_error"],
            bytes_per_sample=data["bytes_per_sample"], pickle_bytes=data["pickled_dataset_bytes"],
            pickle_s=data["pickle_s"], pickle_error=data["pickle_error"],
            cpu_s_per_sample=data["cpu_s_per_sample"], cpu_ceiling=data["cpu_ceiling_samples_per_s"],
            worker_rate=data["worker_samples_per_s"], max_workers_shm=data["max_workers_shm"],
            max_workers_files=data["max_workers_open_files"],
            checks=records(Finding, data["checks"]),
            storage=optional(StorageReads, data.get("storage")), gil=optional(GilShare, data.get("gil")))




def _share(outside_ms: float | None, latency_ms: dict[str, float]) -> float | None:
    """The share of a sample's time spent outside its timed stages (documents before it was saved)."""
    return outside_ms / latency_ms["mean"] if outside_ms is not None and latency_ms.get("mean") else None

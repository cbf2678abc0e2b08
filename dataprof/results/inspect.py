"""``dataprof inspect``'s data: what one Dataset costs per sample, per stage, per batch. Stdlib only.

:class:`InspectionData` is what the measurement produced; ``decide.inspect.analyse``
derives from it the :class:`Inspection` every renderer reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataprof.results.document import SCHEMA_VERSION, to_json
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.findings import Finding


@dataclass(frozen=True)
class StageTiming:
    """One node of the transform tree: leaves are timed; a composite costs what its children cost."""

    name: str
    path: str
    seconds: float
    calls: int
    composite: bool = False
    children: tuple[StageTiming, ...] = ()

    def total_seconds(self) -> float:
        """Seconds spent in this stage: its own, or its children's for a composite."""
        return sum(child.total_seconds() for child in self.children) if self.composite else self.seconds

    def leaves(self) -> list[StageTiming]:
        """The timed stages under this one (itself, if it is timed)."""
        if not self.composite:
            return [self]
        return [leaf for child in self.children for leaf in child.leaves()]


@dataclass(frozen=True)
class InspectionData:
    """Raw measurements of one ``dataprof inspect`` run (seconds and bytes)."""

    target: str
    tool_version: str
    settings: dict[str, Any]
    environment: Environment
    dataset: DatasetInfo
    indices: tuple[int, ...]
    """Indices measured, in order (positions in the stream for an IterableDataset)."""
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    """Process CPU time of each sample (every thread of this process)."""
    sample_bytes: tuple[int, ...]
    first_s: float | None = None
    """The warm-up fetch (lazy opens, caches), not counted in the statistics."""
    errors: tuple[tuple[int, str], ...] = ()
    repeat_s: dict[int, float] = field(default_factory=dict)
    """Second fetch of the slowest indices: a slow *index* repeats, a slow *moment* does not."""
    stages: tuple[StageTiming, ...] = ()
    pipeline_notes: tuple[str, ...] = ()
    collate_s: tuple[float, ...] = ()
    collate_cpu_s: tuple[float, ...] = ()
    collate_error: str | None = None
    pickle_bytes: int | None = None
    pickle_s: float | None = None
    pickle_error: str | None = None
    stopped: str | None = None
    """Why fewer samples than asked were measured, if so."""
    nofile_soft: int | None = None
    nofile_hard: int | None = None
    sharing_strategy: str | None = None
    """torch.multiprocessing's strategy: ``file_descriptor`` keeps one open file per tensor in flight."""


@dataclass(frozen=True)
class Inspection:
    """Everything the inspect report shows, derived from :class:`InspectionData`."""

    data: InspectionData
    latency_ms: dict[str, float]
    slowest: tuple[dict[str, Any], ...]
    cpu_ms_mean: float | None
    cpu_share: float | None
    """CPU time over wall time of a sample (1.0: pure computation)."""
    sample_kind: str | None
    """``computing``, ``waiting`` or ``mixed``, by the cpu_vs_wait check's thresholds; None without samples."""
    transforms: tuple[dict[str, Any], ...]
    tree: tuple[dict[str, Any], ...]
    outside_ms: float | None
    outside_share: float | None
    collate_ms: float | None
    bytes_per_sample: float | None
    cpu_s_per_sample: float | None
    cpu_ceiling: float | None
    worker_rate: float | None
    """Samples/s one worker delivers at the measured wall time per sample."""
    max_workers_shm: int | None
    max_workers_files: int | None
    checks: tuple[Finding, ...]

    def to_json(self) -> str:
        """The ``--json`` document of ``dataprof inspect`` as text."""
        return to_json(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The ``dataprof inspect --json`` document (docs/inspect.md)."""
        data = self.data
        env = data.environment
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "dataprof", "version": data.tool_version},
            "kind": "inspect",
            "target": data.target,
            "settings": dict(data.settings),
            "environment": {
                "cpu_count": env.cpu_count, "usable_cpus": env.usable_cpus, "cpu_reason": env.cpu_reason,
                "ram_bytes": env.ram_bytes, "python": env.python, "torch": env.torch, "platform": env.platform,
                "start_method": env.start_method, "shm_free_bytes": env.shm_free_bytes,
                "open_files_limit": data.nofile_soft, "open_files_hard_limit": data.nofile_hard,
                "sharing_strategy": data.sharing_strategy, "framework": env.framework, "paddle": env.paddle,
            },
            "dataset": {
                "kind": data.dataset.kind, "type": data.dataset.type_name, "length": data.dataset.length,
                "init_s": data.dataset.init_s, "sample": data.dataset.sample,
            },
            "samples": {
                "count": len(data.wall_s),
                "requested": data.settings.get("samples"),
                "stopped": data.stopped,
                "first_ms": to_ms(data.first_s),
                "latency_ms": self.latency_ms,
                "cpu_ms_mean": self.cpu_ms_mean,
                "cpu_share": self.cpu_share,
                "slowest": list(self.slowest),
                "errors": [{"index": index, "error": error} for index, error in data.errors],
            },
            "transforms": list(self.transforms),
            "transform_tree": list(self.tree),
            "transforms_note": "; ".join(data.pipeline_notes) or None,
            "outside_transforms_ms": self.outside_ms,
            "collate_ms": self.collate_ms,
            "collate_error": data.collate_error,
            "bytes_per_sample": self.bytes_per_sample,
            "bytes_per_batch": data.dataset.batch_bytes,
            "batch_samples": data.dataset.batch_samples,
            "batch_tensors": data.dataset.batch_tensors,
            "batch_objects": data.dataset.batch_objects,
            "pickled_dataset_bytes": data.pickle_bytes,
            "pickle_s": data.pickle_s,
            "pickle_error": data.pickle_error,
            "cpu_s_per_sample": self.cpu_s_per_sample,
            "cpu_ceiling_samples_per_s": self.cpu_ceiling,
            "worker_samples_per_s": self.worker_rate,
            "max_workers_shm": self.max_workers_shm,
            "max_workers_open_files": self.max_workers_files,
            "checks": [{"id": c.id, "severity": c.severity, "evidence": c.evidence,
                        "recommendation": c.recommendation} for c in self.checks],
        }


def to_ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds, None kept."""
    return None if seconds is None else seconds * 1000.0


SLOWEST = 10
"""Slowest samples kept (and fetched a second time)."""


def slowest_positions(wall_s: tuple[float, ...], count: int = SLOWEST) -> list[int]:
    """Positions of the slowest samples, slowest first."""
    return sorted(range(len(wall_s)), key=lambda i: -wall_s[i])[:count]

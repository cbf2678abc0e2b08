"""How the trials get their dataset, and what the trials showed the runner that the report tells."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.results.environment import DatasetBuilds


@dataclass
class DatasetSharing:
    """How the trials get their dataset, and what decided it."""

    per_trial: bool = True
    """Each trial builds the dataset (else it is forked from the host's one instance)."""
    builds: DatasetBuilds = DatasetBuilds()
    """What decided it, as the report tells it."""
    forced_per_trial: bool = False
    """A trial forked with the shared dataset failed where one building its own did not."""
    fallback_tried: bool = False
    shared_build_s: float | None = None
    """Set once a trial took over SHARE_BUILD_S to build the dataset: it is built once from then on."""


@dataclass(frozen=True)
class RunnerFacts:
    """What the trials showed the runner that the report tells: the GPU they used, why its utilisation was not
    measured, how they got their dataset."""

    gpu_name: str | None
    gpu_reason: str | None
    builds: DatasetBuilds
    build_per_trial: bool

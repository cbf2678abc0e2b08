"""``dataprof plan``'s document (``"kind": "plan"``): what a sweep's pipeline model predicts for another
machine, the config to use there, and what feeding a model step takes. Data only: ``decide.plan`` makes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataprof.results.codec import HIDDEN, named, records, view
from dataprof.results.document import Document
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.pipeline import PipelineModel
from dataprof.results.vocabulary import Kind


@dataclass(frozen=True)
class TargetMachine:
    """The machine a plan is for: the CPUs, RAM and /dev/shm the job gets on a node, shared by its ranks."""

    cpus: float
    """The node's CPUs for the job (a share of a node is fine: 3.5)."""
    ranks_per_node: int
    ram_bytes: int | None
    shm_bytes: int | None
    step_ms: float
    """The model's step per batch on that machine; 0: the loader's ceiling is asked."""
    batch_size: int
    nodes: tuple[int, ...] = ()
    """The job's nodes this machine describes (``--node``: a node group); empty: every node."""
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("cpus_per_rank",)

    @property
    def cpus_per_rank(self) -> float:
        """Each rank's share of the CPUs."""
        return self.cpus / self.ranks_per_node


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of the job that share a description (``--node 0,2-3:cpus=32,ranks=8``); what is not given is the
    plan's own (``--cpus``, ``--ranks-per-node``, ``--ram``, ``--shm``)."""

    nodes: tuple[int, ...]
    cpus: float | None = None
    ranks_per_node: int | None = None
    ram_bytes: int | None = None
    shm_bytes: int | None = None


@dataclass(frozen=True)
class Feeding:
    """What feeding a model step takes on a rank: its CPUs and workers, or why no CPU count can."""

    step_ms: float
    batch_size: int
    samples_per_s: float
    """The rate that feeds the step."""
    cpus_per_rank: float | None
    """CPUs a rank needs for the loader to keep up with the step (its wait under 5% of each iteration)."""
    workers: int | None
    """Workers it needs for that."""
    cpus: float
    """The CPUs per rank it is weighed against."""
    reason: str | None = None
    """Why no CPU count can feed the step (None when some can)."""

    @property
    def headroom(self) -> float | None:
        """How many more CPUs than needed the rank has (0.26: 26% more; below zero: too few)."""
        return self.cpus / self.cpus_per_rank - 1 if self.cpus_per_rank else None


@dataclass(frozen=True)
class Measured:
    """The sweep a plan is predicted from: its CPUs and why, its completed trials and the worker counts they had,
    its step, batch size, order and collate function."""

    cpus: float
    cpu_reason: str | None
    trials: int
    workers: tuple[int, ...]
    step_ms: float
    batch_size: int
    shuffle: bool = False
    collate_fn: str | None = None


@dataclass(frozen=True)
class PlanPoint:
    """One worker count on the planned machine: its predicted rate and range, what holds it back, and what
    the node's ranks need for it."""

    num_workers: int
    samples_per_s: float
    samples_per_s_low: float
    samples_per_s_high: float
    limit: str
    """What holds the rate back (``decide.model.LIMITS``)."""
    memory_bytes: float | None
    """Peak PSS of every rank's processes on the node."""
    shm_bytes: float | None
    """Batches every rank's workers keep in /dev/shm."""
    fits: bool
    """RAM and /dev/shm allow it (with the sweep's headroom)."""
    feeds_step: bool | None
    """It delivers what feeding the step takes (None without a step)."""


def _recommended_json(plan: Plan) -> dict[str, Any]:
    """The ``recommended`` block: the config to use, then its point's figures."""
    rec = plan.recommended
    return {"config": plan.config.to_dict(), "samples_per_s": rec.samples_per_s,
            "samples_per_s_low": rec.samples_per_s_low, "samples_per_s_high": rec.samples_per_s_high,
            "feeds_step": rec.feeds_step, "limit": rec.limit, "memory_bytes": rec.memory_bytes,
            "shm_bytes": rec.shm_bytes}


def _recommended_from(data: Mapping[str, Any]) -> PlanPoint:
    """The curve's point of the recommended config's worker count."""
    wanted = data["recommended"]["config"]["num_workers"]
    return next(p for p in records(PlanPoint, data["curve"]) if p.num_workers == wanted)


@dataclass(frozen=True)
class Plan(Document):
    """A prediction for another machine from a sweep's pipeline model, and where it leaves what was measured
    (``dataprof plan --json``, docs/plan.md)."""

    KIND: ClassVar[str | None] = Kind.PLAN
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "target", "machine", "recommended", "curve", "cpus_per_rank_to_feed_step", "feeding", "extrapolated",
        "extrapolations", "measured", "knobs", "knobs_reason", "model", "notes", "node_groups")
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("cpus_per_rank_to_feed_step", "extrapolated")
    tool_version: str = field(metadata=HIDDEN)
    target: str
    measured: Measured
    """What the prediction comes from: the sweep's CPUs (``cpus``), its ``cpu_reason``, its ``trials`` and
    the worker counts it measured (``workers``)."""
    machine: TargetMachine
    model: PipelineModel
    knobs: LoaderConfig
    """The sweep's recommended config (its best worker-process config when threads won: the model is of
    worker processes): the plan changes its num_workers only."""
    curve: tuple[PlanPoint, ...]
    recommended: PlanPoint = field(metadata=view(_recommended_json, _recommended_from))
    feeding: Feeding | None
    """With a step: what feeding it takes."""
    extrapolations: tuple[str, ...] = ()
    """Where the plan leaves the measured range (more or fewer CPUs, a worker count never tried, …)."""
    notes: tuple[str, ...] = ()
    knobs_reason: str | None = None
    """Why :attr:`knobs` is not the sweep's recommendation (threads won), or None when it is."""
    groups: tuple[Plan, ...] = field(default=(), metadata=named("node_groups"))
    """With node groups (``--node``): the plans of the other groups (this one is the first group's)."""

    @property
    def config(self) -> LoaderConfig:
        """The config to use on each rank."""
        return dataclasses.replace(self.knobs, num_workers=self.recommended.num_workers) \
            if self.recommended.num_workers else baseline(self.knobs.framework)

    @property
    def cpus_per_rank_to_feed_step(self) -> float | None:
        """With a step: the CPUs a rank needs to feed it (:attr:`Feeding.cpus_per_rank`)."""
        return None if self.feeding is None else self.feeding.cpus_per_rank

    @property
    def extrapolated(self) -> bool:
        """Whether the plan leaves the measured range anywhere."""
        return bool(self.extrapolations)

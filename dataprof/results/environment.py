"""What the numbers were measured on, as data: the machine, the CPUs this process may use, the rank it runs
as, and the dataset.

Measured by ``measure.environment``, ``distributed`` and the probe; read everywhere else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.codec import named, optional
from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import DatasetKind, Framework


@dataclass(frozen=True)
class CpuBudget:
    """How many CPUs this process may really use, and why."""

    usable: int
    """CPUs for this process's loader: the node's usable CPUs, shared out among its ranks."""
    affinity: int
    quota: float | None
    cpu_count: int
    ranks_per_node: int = 1
    pinned_from: int | None = None
    """With ``--cpus``: the CPUs this process had before its trials were pinned to :attr:`usable` of them."""

    def pin(self, cpus: int) -> CpuBudget:
        """This budget with the trials pinned to ``cpus`` of its usable CPUs (``--cpus``)."""
        return CpuBudget(cpus, self.affinity, self.quota, self.cpu_count, self.ranks_per_node, self.usable)

    def explain(self) -> str:
        """Why this many CPUs, in words: affinity, cgroup quota, the ranks sharing the node, ``--cpus``."""
        quota = "no cgroup CPU quota" if self.quota is None else f"cgroup quota {self.quota:g} CPUs"
        if self.pinned_from is not None:
            return (f"{self.usable} CPU{'s' if self.usable != 1 else ''} pinned with --cpus, of the "
                    f"{self.pinned_from} usable (affinity {self.affinity} of {self.cpu_count}, {quota})")
        if self.ranks_per_node > 1:
            return (f"{self.usable} usable CPU{'s' if self.usable != 1 else ''} per rank ({self.ranks_per_node} "
                    f"ranks share this node's "
                    f"{self.node_usable}: affinity {self.affinity} of {self.cpu_count}, {quota})")
        return f"{self.usable} usable CPUs (affinity {self.affinity} of {self.cpu_count}, {quota})"

    @property
    def node_usable(self) -> int:
        """CPUs the node offers this job: affinity, capped by the cgroup quota (rounded up)."""
        return self.affinity if self.quota is None else max(1, min(self.affinity, math.ceil(self.quota)))


@dataclass(frozen=True)
class RankInfo:
    """A process's place in a distributed job (torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_*``, ``GROUP_RANK``)."""

    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    """Ranks on this node (they share its CPUs, RAM and /dev/shm)."""
    node: int = 0
    """``GROUP_RANK``: the node's index in the job."""
    host: str = ""

    @property
    def nodes(self) -> int:
        """Nodes in the job: world size over ranks per node."""
        return max(1, self.world_size // max(1, self.local_world_size))


@dataclass(frozen=True)
class NodeJob:
    """Where the nodes of a tune meet, in torchrun's words (``--nnodes``, ``--node-rank``, ``--master-addr``,
    ``--master-port``): node 0's dataprof serves the meeting at that port and each run's ranks meet at the next."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    join_s: float = 120.0
    """How long a node waits for the others: to reach node 0's meeting, and in each run's rendezvous."""

    @property
    def leader(self) -> bool:
        """Node 0: it decides the runs and reports."""
        return self.node_rank == 0

    @property
    def runs_endpoint(self) -> str:
        """Where each run's ranks meet (node 0's launcher hosts it): the port beside the tune's."""
        return f"{self.master_addr}:{self.master_port + 1}"

    def check(self) -> None:
        """UsageError for words that cannot make a job."""
        from dataprof.errors import UsageError

        if self.nnodes < 2:
            raise UsageError(f"--nnodes {self.nnodes}: a tune across nodes needs two or more")
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(f"--node-rank {self.node_rank}: give 0 to {self.nnodes - 1} (node 0 decides the runs)")
        if not 0 < self.master_port < 65535:
            raise UsageError(f"--master-port {self.master_port}: a TCP port below 65535 (the next one is used too)")
        if not self.join_s > 0:
            raise UsageError(f"--join-timeout {self.join_s:g}: must be above 0")


@dataclass(frozen=True)
class Environment:
    """The machine the numbers were measured on."""

    cpu_count: int
    usable_cpus: int
    cpu_reason: str
    ram_bytes: int
    available_ram_bytes: int
    python: str
    torch: str | None
    device: str
    """``cpu`` (simulated device) or ``cuda:N``."""
    gpu_name: str | None = None
    platform: str = ""
    start_method: str | None = None
    """multiprocessing start method the DataLoader workers use."""
    shm_free_bytes: int | None = None
    open_files_limit: int | None = None
    """Soft RLIMIT_NOFILE; None when unlimited or unknown."""
    sharing_strategy: str | None = None
    """torch.multiprocessing sharing strategy (``file_descriptor`` holds one open file per tensor in flight)."""
    framework: str = "torch"
    """Whose DataLoader was measured: ``torch`` or ``paddle``."""
    paddle: str | None = None
    """Installed paddlepaddle version, if any."""
    world_size: int = 1
    """Ranks in a distributed sweep (torchrun); 1 otherwise."""
    nodes: int = 1
    local_world_size: int = 1
    """Ranks per node: ``usable_cpus`` is each rank's share of the node's CPUs."""
    cpu_quota: float | None = None
    """The cgroup CPU quota on this process (CPUs: 0.5 is half a CPU's time); None without one. ``usable_cpus``
    rounds it up."""

    @property
    def framework_version(self) -> str | None:
        """The measured framework's version."""
        return self.paddle if self.framework == Framework.PADDLE else self.torch

    @property
    def simulated_device(self) -> bool:
        """Whether the device was simulated (no CUDA device used)."""
        return not self.device.startswith("cuda")


@dataclass(frozen=True)
class UserLoader:
    """A DataLoader target: what the sweep keeps of the user's loader, rebuilt for each trial with only the swept
    knobs changed (``dataset.loader`` in a sweep's document)."""

    cls: str = field(metadata=named("class"))
    """Its class, by module and name."""
    batch_size: int | None = None
    batch_sampler: str | None = None
    """Its batch sampler's class, when it has one (it decides the batches)."""
    sampler: str | None = None
    shuffle: bool = False
    drop_last: bool = False
    collate_fn: str | None = None
    worker_init_fn: str | None = None
    extra_arguments: tuple[str, ...] = ()
    """The arguments of a DataLoader subclass's own that it was given."""
    current: LoaderConfig | None = None
    """Its own settings of the swept knobs."""
    rebuilt_from: str = "its arguments"
    """``its constructor call`` (recorded as it was made) or ``its attributes``."""
    origin: str | None = None
    """Where it was built (``train.py:41``)."""

    @property
    def name(self) -> str:
        """Its class's own name (``DataLoader``)."""
        return self.cls.rpartition(".")[2]


@dataclass(frozen=True)
class ProbeReply:
    """What the sweep's probe found in the host that runs the trials: the framework and its DataLoader's arguments
    there, the start methods, what builds thread workers and how much of a sample releases the GIL, and a
    DataLoader target's own block. Read from the probe's message (:meth:`of`); the defaults are a reply with
    nothing found."""

    framework: Framework = Framework.TORCH
    framework_version: str | None = None
    kind: DatasetKind | None = None
    loader_arguments: tuple[str, ...] = ()
    """The installed DataLoader's arguments (empty: not found, the registry's are assumed)."""
    start_method: str | None = None
    """The start method workers get by default."""
    start_methods: tuple[str, ...] = ()
    sharing_strategy: str | None = "file_descriptor"
    """torch.multiprocessing's: ``file_descriptor`` holds one open file per tensor in flight."""
    thread_loader: str | None = None
    """What builds a thread config's loader here (``torch``, ``torchdata.nodes``); None: nothing."""
    gil_release: float | None = None
    """Share of a sample's time that releases the GIL, and its upper bound (None: not measured)."""
    gil_release_high: float | None = None
    free_threaded: bool = False
    loader: UserLoader | None = None
    """A DataLoader target's own block: its class, batch size, sampler and settings."""
    batch_samples: int | None = None
    """Samples in a DataLoader target's first batch."""

    @classmethod
    def of(cls, message: Mapping[str, Any]) -> ProbeReply:
        """The reply in the probe's message."""
        gil = message.get("gil") or {}
        return cls(framework=Framework(message.get("framework", Framework.TORCH)),
                   framework_version=message.get("framework_version"),
                   kind=None if message.get("kind") is None else DatasetKind(message["kind"]),
                   loader_arguments=tuple(message.get("loader_arguments") or ()),
                   start_method=message.get("start_method"), start_methods=tuple(message.get("start_methods") or ()),
                   sharing_strategy=message.get("sharing_strategy", "file_descriptor"),
                   thread_loader=message.get("thread_loader"), gil_release=gil.get("release"),
                   gil_release_high=gil.get("release_high"), free_threaded=bool(gil.get("free_threaded")),
                   loader=optional(UserLoader, message.get("loader") or None),
                   batch_samples=message.get("batch_samples"))


@dataclass(frozen=True)
class DatasetBuilds:
    """How a sweep's trials got their dataset, and what decided it (facts; ``decide.sweep.build_note`` words
    them)."""

    given: bool = False
    """The dataset object was handed over: every trial is forked from the process holding it."""
    shared_after_s: float | None = None
    """A trial took this long to build the dataset: from then on it is built once, each trial forked from it."""
    fallback: tuple[str, str, str | None] | None = None
    """(config label, status, error) of a trial forked with the shared dataset that failed where the same config
    building its own completed: every trial builds its own from then on."""
    build_s: float | None = None
    """The first trial's build of the dataset, each trial building its own."""


@dataclass(frozen=True)
class DatasetInfo:
    """What the target turned out to be."""

    kind: str
    """``map`` or ``iterable``."""
    type_name: str
    length: int | None
    init_s: float
    """Time to import and construct the dataset, measured in the probe that checks its first batch."""
    sample: str | None = None
    """Structure of one sample, e.g. ``(Tensor[3,32,32] float32, int)``."""
    batch_samples: int | None = None
    """Samples in the first batch (the batch size, unless the dataset is smaller)."""
    batch_bytes: int | None = None
    """Array payload of one batch: what sits in shared memory while in flight."""
    batch_tensors: int | None = None
    batch_objects: int | None = None
    """Python objects other than arrays in one batch, each pickled on its own."""
    has_getitems: bool | None = None
    """Whether the dataset fetches a batch's samples at once (``__getitems__``, as Hugging Face datasets do)."""
    build: str | None = None
    """How trials got the dataset: ``per_trial`` (each built its own, as cold as a training process) or
    ``once`` (built once; every trial forked from the process that built it and never iterated it)."""
    loader: UserLoader | None = None
    """A DataLoader target: what the sweep keeps of the user's loader (its class, batch size, sampler,
    collate_fn, worker_init_fn, other arguments) and its own settings (``current``); None for a Dataset."""
    thread_loader: str | None = None
    """What builds a thread config's loader here (``torch``, ``torchdata.nodes``); None: neither is installed,
    or the target cannot be loaded by threads (an IterableDataset, a DataLoader target, Paddle)."""
    gil: dict[str, Any] | None = None
    """How much of a sample's ``__getitem__`` releases the GIL (a ``results.threads.GilShare`` as JSON), measured
    in the probe when threads can load the dataset."""

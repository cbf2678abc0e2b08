"""Result data of ``dataprof run``: what watching a real training script measured (``"kind": "run"``). Stdlib only.
``RunReport.to_dict()`` is the documented document (docs/run.md); ``from_dict`` reads it back. Figures are steady
state unless named otherwise: each epoch's first batches (the workers' start, their prefetch) are reported apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataprof.results.codec import FLAT, HIDDEN, encode, view, written_if
from dataprof.results.document import Document
from dataprof.results.environment import Environment
from dataprof.results.findings import Finding, GateResult
from dataprof.results.knobs import KnobValues, checked_knobs
from dataprof.results.registry import REGISTRY
from dataprof.results.trial import Percentiles
from dataprof.results.vocabulary import Kind, SlowRankCause, StopCause


@dataclass(frozen=True)
class LoaderRun:
    """One DataLoader the script created and iterated, and how its batches arrived."""

    site: str
    """``file:line`` where the script created it."""
    dataset: str
    """The dataset's class name."""
    dataset_module: str | None
    dataset_file: str | None = field(default=None, kw_only=True)
    """The file defining the dataset's class (relative to where the script ran, when under it; None in documents
    older than the key)."""
    loader_class: str
    framework: str = field(default="torch", kw_only=True)
    """Whose DataLoader: ``torch`` or ``paddle`` (``torch`` in documents older than the key)."""
    batch_size: int | None
    num_workers: int | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    pin_memory: bool | None
    batches: int
    """Batches the script took from it, warm-up included."""
    epochs: int
    """Epochs begun (iterators created)."""
    steady_batches: int
    """Batches in the steady state: each epoch's warm-up batches left out."""
    samples_per_s: float | None
    """Steady-state samples over steady-state (wait + step) time."""
    data_wait_fraction: float | None
    """Share of the steady-state iteration time the script was blocked in ``next()`` (0–1)."""
    wait_ms: Percentiles | None
    """Time blocked in ``next()`` per batch: ``p50``, ``p95``, ``mean`` (ms)."""
    step_ms: Percentiles | None
    """Time from a batch's arrival to the next ``next()`` (the training step): ``p50``, ``p95``, ``mean`` (ms)."""
    first_batch_s: tuple[float, ...] = ()
    """Per epoch: seconds from the iterator's creation to its first batch (worker start-up)."""
    warmup_wait_fraction: float | None = None
    """Share of the loader's whole time (every batch, every epoch) spent waiting at each epoch's start: its first
    batch and the rest of its warm-up. Large when epochs are short next to the workers' start."""
    factory: str | None = None
    """The importable function (or DataModule) that built the loader, as a sweep TARGET; None if none."""
    factory_args: tuple[str, ...] | None = None
    """Its arguments as ``--arg`` items (those left at their defaults omitted)."""
    factory_blocked: str | None = None
    """Why the factory cannot be swept as called (an argument ``--arg`` cannot give); None when it can."""
    factory_split: str | None = None
    """A DataModule factory: the ``<split>_dataloader()`` that built the loader."""
    worker_kind: str = "process"
    """``thread`` for a loader whose workers are threads (a ``torchdata.nodes`` ParallelMapper over threads)."""
    other_knobs: dict[str, Any] = field(default_factory=dict, metadata=written_if(lambda run: bool(run.other_knobs)))
    """The knobs it has that the fields above do not hold (``in_order``, Paddle's), by their records' names, where
    the script set them away from the loader's default (written only then)."""
    iterations_per_s: float | None = None
    """The training's pace: batches per second of wall time from the end of the start-up (the first epoch's
    warm-up) to the last batch, every later epoch's start included (``samples_per_s`` leaves those out)."""
    dataset_library: bool = field(default=False, metadata=written_if(lambda run: run.dataset_library))
    """Whether the dataset's class is an installed library's whose constructor needs arguments (a Hugging Face
    ``datasets.Dataset``): a sweep cannot build it from its name (written only then)."""
    iterable: bool = False
    """Whether its dataset is a stream (an ``IterableDataset``): no indices to hand out, so no thread workers."""
    start_method: str | None = None
    """How its worker processes start (``fork``, ``forkserver``, ``spawn``); None without worker processes."""
    start_method_chosen: bool = False
    """Whether the script chose it (``multiprocessing_context``, ``set_start_method``): ``tune`` keeps it."""
    replayed_after: int | None = None
    """``--replay``: the batches it delivered before its replay began (None: no replay began)."""
    split: str | None = None
    """The split it serves where the stack that built it says (``train``, ``val``, ``test``, ``predict``: a
    Lightning hook's name, HF Trainer's ``get_eval_dataloader``, timm's ``is_training``); None: not said."""
    built_by: tuple[str, ...] = ()
    """The library functions that built it for the user's line (``module:qualname``, innermost first); empty
    when the user's own line called its constructor."""
    training_fraction: float | None = None
    """Share of its batches asked for with autograd on (a training loop's; an evaluation runs under
    ``no_grad``)."""
    epoch_samples: tuple[int, ...] = ()
    """The samples of each of its epochs that ran out, in order (an IterableDataset's workers that do not shard
    it each yield the whole stream: more workers, more samples an epoch)."""
    batch_bytes: int | None = None
    """The bytes of its first batch's tensors (and other buffers): what a worker puts in /dev/shm per batch."""
    knobs_lost: dict[str, Any] | None = None
    """``--override``: the knobs set where it was built that it no longer had at its first iteration (the
    script changed them after construction), with the values it had."""

    def knobs(self) -> KnobValues:
        """Its knobs as the script set them, by their records' names (``num_workers`` first; None: not known),
        each a knob the records say a run reports (:attr:`~dataprof.results.registry.Knob.reported`) or one of
        :attr:`other_knobs` this dataprof knows, in the records' order; a knob that picks the loader rather than
        setting one of its arguments (its worker kind) only where it picks another than the default."""
        values: dict[str, Any] = {"num_workers": self.num_workers}
        for knob in REGISTRY:
            if knob.reported is not None:
                value = getattr(self, knob.reported)
                values[knob.name] = value if knob.keyword or value != knob.held else None
            elif knob.name in self.other_knobs:
                values[knob.name] = self.other_knobs[knob.name]
        return KnobValues(values)


@dataclass(frozen=True)
class RunResources:
    """The training process tree, sampled from outside over the whole watch."""

    cpu_percent: float | None = None
    """CPU of the whole tree; 100 = one core."""
    main_cpu_percent: float | None = None
    """CPU of the training process itself (all its threads)."""
    workers_cpu_percent: float | None = None
    """CPU of its child processes (DataLoader workers)."""
    cpu_percent_system: float | None = None
    """Whole machine, % of all CPUs."""
    foreign_cpu_percent: float | None = None
    """CPU other processes took on the CPUs the training may use (its affinity); 100 = one core."""
    iowait_percent: float | None = None
    peak_memory_bytes: int | None = None
    """Peak PSS of the tree (shared pages counted once)."""
    gpu_util_percent: float | None = None
    """Mean NVML utilisation; None without an NVIDIA GPU."""
    gpu_memory_bytes: int | None = None
    gpu_timeline: tuple[float, ...] = ()
    """GPU utilisation (%) over the watch, in up to 60 equal slices of time (the terminal draws it)."""
    storage_read_bytes_per_s: float | None = None
    """Bytes per second the tree read from storage (``/proc/PID/io`` ``read_bytes``: page-cache misses)."""
    storage_timeline: tuple[float, ...] = ()
    """Those bytes per second over the watch, in up to 60 equal slices: reads that stop after epoch 1 went warm."""
    data_files: int | None = None
    """Data files the tree held open or had mapped at a reading (not the interpreter's, libraries' or code)."""
    data_bytes: int | None = None
    data_resident_fraction: float | None = None
    """Share of those files in the page cache when the watch ended (``mincore``)."""


@dataclass(frozen=True)
class RankRun:
    """One rank of a distributed run (torchrun), by its busiest loader."""

    rank: int
    host: str
    exit_code: int | None
    data_wait_fraction: float | None
    samples_per_s: float | None
    step_ms_p50: float | None
    node: int | None = None
    """``GROUP_RANK``: the node's index in the job."""
    ranks_on_node: int | None = None
    """Ranks on its node (``LOCAL_WORLD_SIZE``): they share the node's CPUs."""
    num_workers: int | None = None
    """Its busiest loader's workers."""
    node_cpus: int | None = None
    """CPUs its node lets the training use (affinity, cgroup quota)."""
    node_cpu_quota: float | None = None
    """The cgroup CPU quota on it (0.5: half a CPU's time), which ``node_cpus`` rounds up; None without one."""
    cpu_percent: float | None = None
    """CPU of its process tree (the training and its workers); 100 = one core."""
    node_busy_percent: float | None = None
    """Its node's CPUs busy over the watch, every process's (% of all the node's CPUs)."""
    node_cpu_count: int | None = None
    """All the node's CPUs (what ``node_busy_percent`` is a share of)."""
    storage_read_bytes_per_s: float | None = None
    """What its tree read from storage (page-cache misses)."""
    foreign_cpu_percent: float | None = None
    """CPU other processes (other ranks included) took on the CPUs it may use; 100 = one core."""
    iowait_percent: float | None = None
    """Its node's CPU time waiting on storage."""
    peak_memory_bytes: int | None = None
    """Peak PSS of its tree."""


@dataclass(frozen=True)
class RankCause:
    """Why the rank that waits most for data waits, and what to change on its node: in synchronous training every
    step waits for it (``dataprof.decide.run.rank_cause``)."""

    finding: Finding = field(metadata=FLAT)
    rank: int
    node: int | None
    cause: SlowRankCause
    num_workers: int | None = None
    """The ``num_workers`` to set on its node; None when the change is not a number of workers."""


@dataclass(frozen=True)
class RunChanges:
    """What the watch changed in the script's loaders (``--override``, ``--replay``), for every loader or the one
    built at ``loader``."""

    knobs: KnobValues = field(default_factory=KnobValues)
    """The knobs set where the loader is built, by their DataLoader names."""
    replay: int | None = None
    """Its first this many batches replayed in place of the loader: data for free (the training's ceiling)."""
    loader: str | None = None
    """``file:line`` of the loader changed; None: every loader."""
    overridden: int = 0
    """Loaders built with ``knobs`` (0 when none matched)."""
    split: str | None = None
    """With ``loader``: only the loader of this split built there (``tune``'s: a framework builds its
    validation loader at the user's same line)."""

    def __post_init__(self) -> None:
        checked_knobs(self, "knobs")

    def applies(self, site: str, split: str | None = None) -> bool:
        """Whether the loader built at ``site`` (for ``split``) is the one changed."""
        if self.loader is None:
            return True
        return (site == self.loader or site.endswith("/" + self.loader)) and (self.split is None or split == self.split)


def _loaders_json(report: RunReport) -> list[dict[str, Any]]:
    """Each loader with the run's mean GPU utilisation (the document's ``loaders``, as its first version wrote)."""
    return [{**encode(loader), "gpu_util_percent": report.resources.gpu_util_percent} for loader in report.loaders]


@dataclass(frozen=True, kw_only=True)
class RunReport(Document):
    """A watched training run: its loaders, its resources, and the verdict decided from them. Its fields are in its
    document's order (docs/run.md)."""

    KIND: ClassVar[str | None] = Kind.RUN
    HEADER: ClassVar[tuple[str, ...]] = ("kind", "tool")
    tool_version: str = field(metadata=HIDDEN)
    command: tuple[str, ...]
    """The script (or ``-m module``) and its arguments, as run."""
    complete: bool = True
    environment: Environment
    loaders: tuple[LoaderRun, ...] = field(metadata=view(_loaders_json))
    """Busiest first (most batches)."""
    resources: RunResources
    wall_s: float
    exit_code: int | None
    """The script's own exit code (128 + N when signal N killed it, as a shell says)."""
    ended_by: str | None = None
    """Why the watch ended before the script did (``--max-steps``, ``--seconds``, Ctrl-C); None if it ran out."""
    verdict: Finding | None = None
    """Whether the training waits for data, and what to do (decided by ``dataprof.decide.run``)."""
    next_command: str | None = None
    """The ``dataprof sweep …`` to run next, with the measured step."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    gates: tuple[GateResult, ...] = ()
    """The CI gates given (``--max-data-wait``, …), passed or failed."""
    ranks: tuple[RankRun, ...] = ()
    """Under torchrun, on rank 0: every rank's figures (this report's loaders are rank 0's)."""
    changes: RunChanges | None = None
    """What the watch changed in the loaders; None: the script ran as it is."""
    stderr_tail: tuple[str, ...] = ()
    """The last lines the script wrote to its stderr (its traceback's end, when it raised)."""
    stderr_causes: tuple[str, ...] = ()
    """Its stderr's lines, anywhere in it, that name a cause a run fails for (``results.tune.CAUSE_WORDS``)."""
    stopped: str | None = None
    """Why the watch ended the script itself (SIGINT, then SIGTERM, then SIGKILL): past its limit, long after
    its window, another rank failed; None when it did not."""
    stop_cause: StopCause | None = None
    """:attr:`stopped` as a word (:class:`~dataprof.results.vocabulary.StopCause`)."""
    own_ranks: str | None = None
    """How the script started ranks of its own, where, and how many processes (``torch.multiprocessing.spawn at
    train.py:310, 2 processes``): they ran unwatched; None when it started none."""
    rank_cause: RankCause | None = None
    """Under torchrun, on rank 0: why the rank that waits most for data waits, and what to change on its node
    (``dataprof.decide.run.rank_cause``); None when no rank waits much more than the others."""

    def slowest_rank(self) -> RankRun | None:
        """The rank that waited for data the most: in synchronous training it sets everyone's pace."""
        waited = [r for r in self.ranks if r.data_wait_fraction is not None]
        return max(waited, key=lambda r: r.data_wait_fraction or 0.0) if waited else None

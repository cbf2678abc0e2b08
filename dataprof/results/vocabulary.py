"""The words the documents are made of: severities, trial statuses and finding ids, as ``str`` enums.

Each member is its JSON string (``Severity.WARNING == "warning"``, ``json.dumps`` writes ``"warning"``), so the
documents read as before; in the code a misspelt word is an ``AttributeError`` or a type error, never a silent
miss. Reading a document, an unknown word is an error (``Word(value)`` raises ``ValueError``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any


class Word(str, enum.Enum):
    """A word of the vocabulary: printed, formatted and hashed as its string."""

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return str(self.value)


class Kind(Word):
    """What a saved document holds: a sweep's result (its JSON has no ``kind``), a watched run, an inspection,
    a plan for another machine."""

    SWEEP = "sweep"
    RUN = "run"
    INSPECT = "inspect"
    PLAN = "plan"
    TUNE = "tune"
    """The user's training run with each loader config tried (``dataprof tune``)."""


class Severity(Word):
    """How much a finding matters, least first."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for ``info``, 1 for ``warning``, 2 for ``critical``: the one order every list and gate uses."""
        return list(Severity).index(self)


class ThreadVerdict(Word):
    """What comparing a thread loader's batches with the same indices fetched one by one found."""

    SAME = "same"
    DIFFERS = "differs"
    """Other samples: the dataset's ``__getitem__`` is not thread-safe; thread trials fail."""
    UNCHECKED = "unchecked"
    """The same indices fetched twice one by one differ (random samples): nothing to compare."""
    FAILED = "failed"
    """The check itself raised or hung."""


class TuneVerdict(Word):
    """What ``dataprof tune``'s runs say of the loader: the kind of its answer."""

    CHANGE = "change"
    """A config other than the script's own, shown no slower than it (and than the fastest) beyond the bound."""
    KEEP = "keep"
    """The script's own config, shown as fast as the fastest (and none as fast is cheaper): nothing to change."""
    CANNOT_TELL = "cannot_tell"
    """The runs' noise is too large to show any config as fast as the fastest and no slower than the script's."""
    NOTHING_COMPARED = "nothing_compared"
    """No config other than the script's own completed a run."""


class Framework(Word):
    """Which DataLoader a config, a loader or a sweep is for (``--framework``, a config's ``framework``)."""

    TORCH = "torch"
    """``torch.utils.data.DataLoader``."""
    PADDLE = "paddle"
    """``paddle.io.DataLoader``."""


class WorkerKind(Word):
    """How a loader's workers run (``--worker-kind``, a trial config's ``worker_kind``)."""

    PROCESS = "process"
    """The DataLoader's worker processes."""
    THREAD = "thread"
    """Threads of the one process (``torchdata.nodes``, or the DataLoader's own ``worker_method``)."""


class CacheMode(Word):
    """``--cache``: when a sweep measures cold; ``warm`` and ``cold`` also say which figure a recommendation, a
    trial or the training's steady state is."""

    AUTO = "auto"
    """Cold trials when the trials read data files."""
    WARM = "warm"
    COLD = "cold"
    BOTH = "both"
    """Every config measured warm is measured cold too."""


class StartMethod(Word):
    """How worker processes start (``--start-method``, the DataLoader's ``multiprocessing_context``)."""

    FORK = "fork"
    FORKSERVER = "forkserver"
    SPAWN = "spawn"


class DatasetKind(Word):
    """A map-style dataset (``__getitem__`` and ``__len__``) or an iterable one (a stream)."""

    MAP = "map"
    ITERABLE = "iterable"


class TrialStatus(Word):
    """How a trial (or Paddle's autotune, or one rank's share of a trial) ended."""

    OK = "ok"
    FAILED = "failed"
    """The loader raised: the user's code, a worker's exception, a sample that cannot be collated."""
    TIMEOUT = "timeout"
    """No batch for ``--trial-timeout`` seconds: killed."""
    OOM = "oom"
    """Its processes passed ``--memory-limit``: killed before the OOM killer acts."""
    CRASHED = "crashed"
    """A process died by a signal (a segfault, the OOM killer, a bus error on /dev/shm)."""
    SKIPPED = "skipped"


class StopCause(Word):
    """Why the watch ended a script itself (``stop_cause``; ``stopped`` says it in words)."""

    LIMIT = "limit"
    """It ran past its limit (tune's runs: ``--trial-seconds`` and the allowance on top)."""
    STARTUP = "startup"
    """Its limit ran out before its training's first batch."""
    OWN_RANKS = "own_ranks"
    """It started ranks of its own, which iterate the loader while it waits on them."""
    AFTER_WINDOW = "after_window"
    """It went on long after its window (tune's runs)."""
    NO_EXIT = "no_exit"
    """Its process outlived its last batch (a thread that never ends)."""
    PEER_FAILED = "peer_failed"
    """Another rank of its job failed (tune's runs): it is ended for theirs, not for a failure of its own."""


class SlowRankCause(Word):
    """Why the rank that waits most for data in a run across ranks waits (``rank_cause.cause``)."""

    OVERSUBSCRIBED = "oversubscribed"
    """Its node's CPUs are busy and its ranks run more workers than the node has CPUs for them."""
    CPUS_TAKEN = "cpus_taken"
    """Other processes take a material share of the CPUs its node gives the training."""
    CPUS_SHORT = "cpus_short"
    """Its loading needs more CPUs than its node gives it, with no more workers than CPUs."""
    STORAGE = "storage"
    """It reads from storage where the other ranks read from the page cache."""
    NO_WORKERS = "no_workers"
    """It loads in the training process (``num_workers=0``)."""
    UNKNOWN = "unknown"
    """None of these: its samples cost more or arrive slower (a costlier shard, its network)."""


class FindingId(Word):
    """What a finding is about: a sweep's primary verdict or other finding, ``dataprof run``'s verdict, or
    ``dataprof inspect``'s check (the ids are the JSON contract; docs/diagnosis.md, run.md, inspect.md)."""

    MODEL_BOUND = "model_bound"
    TRANSFER_BOUND = "transfer_bound"
    MAIN_PROCESS_BOUND = "main_process_bound"
    MEMORY_BOUND = "memory_bound"
    SHORT_EPOCH = "short_epoch"
    CPU_BOUND = "cpu_bound"
    IO_BOUND = "io_bound"
    STORAGE_BOUND = "storage_bound"
    COPY_ON_READ = "copy_on_read"
    WORKER_STARTUP = "worker_startup"
    STRAGGLERS = "stragglers"
    ITERABLE_DUPLICATES = "iterable_duplicates"
    RANK_DUPLICATES = "rank_duplicates"
    SHM_RISK = "shm_risk"
    SINGLE_PROCESS = "single_process"
    RANK_IMBALANCE = "rank_imbalance"
    OVERSUBSCRIBED = "oversubscribed"
    IPC_OVERHEAD = "ipc_overhead"
    NO_GPU = "no_gpu"
    BUSY_MACHINE = "busy_machine"
    EPOCH_START = "epoch_start"
    MAIN_PROCESS_LOADING = "main_process_loading"
    TOO_SHORT = "too_short"
    NO_LOADER = "no_loader"
    SAMPLE_ERRORS = "sample_errors"
    CPU_VS_WAIT = "cpu_vs_wait"
    DOMINANT_STAGE = "dominant_stage"
    COLLATE = "collate"
    SHM_SPACE = "shm_space"
    OPEN_FILES = "open_files"
    START_METHOD = "start_method"


TITLES: dict[FindingId, str] = {
    FindingId.STORAGE_BOUND: "storage-bound: cold reads set the pace",
    FindingId.MODEL_BOUND: "model-bound: the loader keeps up",
    FindingId.TRANSFER_BOUND: "transfer-bound: host-to-device copies",
    FindingId.MAIN_PROCESS_BOUND: "main-process-bound",
    FindingId.MEMORY_BOUND: "memory-bound: RAM limits the worker count",
    FindingId.SHORT_EPOCH: "short epochs: the loader restarts at every epoch",
    FindingId.CPU_BOUND: "CPU-bound",
    FindingId.IO_BOUND: "I/O-bound: samples wait on something other than CPU",
    FindingId.COPY_ON_READ: "copy-on-read memory growth",
    FindingId.WORKER_STARTUP: "worker start-up",
    FindingId.STRAGGLERS: "slow samples (stragglers)",
    FindingId.ITERABLE_DUPLICATES: "IterableDataset duplicates",
    FindingId.RANK_DUPLICATES: "every rank loads the same stream",
    FindingId.SHM_RISK: "shared memory (/dev/shm)",
    FindingId.SINGLE_PROCESS: "workers never started",
    FindingId.RANK_IMBALANCE: "a slow rank sets the pace",
    FindingId.OVERSUBSCRIBED: "oversubscribed CPUs",
    FindingId.IPC_OVERHEAD: "worker overhead exceeds the work",
    FindingId.NO_GPU: "simulated device",
    FindingId.BUSY_MACHINE: "other processes compete for the CPUs",
    FindingId.EPOCH_START: "waits for data at each epoch's start",
    FindingId.MAIN_PROCESS_LOADING: "waits for data: batches load in the training process",
    FindingId.TOO_SHORT: "too short to judge",
    FindingId.NO_LOADER: "no DataLoader iterated",
    FindingId.SAMPLE_ERRORS: "samples that raise",
    FindingId.CPU_VS_WAIT: "computing or waiting",
    FindingId.DOMINANT_STAGE: "one transform stage dominates",
    FindingId.COLLATE: "collation",
    FindingId.SHM_SPACE: "room in /dev/shm for the workers' batches",
    FindingId.OPEN_FILES: "open files for the tensors in flight",
    FindingId.START_METHOD: "how workers start",
}
"""The one human name of each id, for every kind of document (the ids are the JSON contract)."""


class Event(Word):
    """What a sweep tells its observer while it runs (the progress shown; ``data`` carries the figures)."""

    LOADING = "loading"
    """The dataset is being loaded: ``target``."""
    AUTOTUNE_START = "autotune_start"
    """Paddle's own autotune starts: ``steps``."""
    AUTOTUNE_DONE = "autotune_done"
    """…and ended: ``autotune`` (an AutotuneRun)."""
    PLANNED = "planned"
    """The search knows how many trials it plans at most: ``total``."""
    TRIAL_START = "trial_start"
    """A trial starts: ``config``, ``index``, ``why``."""
    FIRST_BATCH = "first_batch"
    """Its first batch came: ``config``."""
    PROGRESS = "progress"
    """A heartbeat while it runs: ``config``."""
    WINDOW_START = "window_start"
    """Its timed window opens: ``config``."""
    TRIAL_DONE = "trial_done"
    """It ended: ``result`` (a TrialResult), ``index``."""


Observer = Callable[[Event, dict[str, Any]], None]
"""Told of each :class:`Event` of a sweep, with its data: the progress a renderer shows."""

"""``dataprof tune``'s document: the user's own training run once per loader config tried, its iterations/s in a
steady window, the headspace (the training with data for free) and the answer. Data only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataprof.results.codec import FLAT, HIDDEN, encode, named, view, written_if
from dataprof.results.document import Document
from dataprof.results.knobs import KnobValues, checked_knobs
from dataprof.results.trial import Percentiles
from dataprof.results.vocabulary import Kind, TrialStatus, TuneVerdict

CAUSE_WORDS: dict[str, tuple[str, ...]] = {
    "shm": ("shared memory", "/dev/shm", "bus error", "sigbus", "no space left on device"),
    "open files": ("too many open files",),
    "memory": ("killed by signal: killed", "out of memory", "cannot allocate memory", "sigkill"),
    "its files": ("fileexistserror", "already exists", "file exists"),
    "limit": ("did not end", "did not exit"),
}
"""The causes a run of the training fails for, by the words (lower case) of what says so: a line anywhere in what
the script wrote to its stderr, or the run's error. Their explanations are ``decide/tune/causes.py``'s."""


@dataclass(frozen=True)
class TuneRank:
    """One rank of a run over ranks (``--nproc-per-node``, ``--nnodes``): its own figures."""

    rank: int
    iterations_per_s: float | None
    data_wait_fraction: float | None
    step_ms_p50: float | None
    node: int | None = field(default=None, metadata=written_if(lambda rank: rank.node is not None))
    """Its node's index in the job (across nodes)."""
    host: str | None = field(default=None, metadata=written_if(lambda rank: rank.host is not None))
    """Its node's host name (across nodes, where node 0 heard it)."""


@dataclass(frozen=True)
class TuneTrial:
    """One run of the training: the knobs set on its loader, and what its steady window measured."""

    config: KnobValues
    """The loader's knobs in this run, by their DataLoader names (the script's own for ``current``)."""
    status: TrialStatus
    role: str = "candidate"
    """``current`` (the script as it is), ``headspace`` (its first batches replayed: data for free),
    ``candidate`` (a config the search tried) or ``sweep`` (the loader-only sweep's pick)."""
    error: str | None = None
    """Why the run failed: how the script ended (its exit code and last line), or that its loader was not
    found."""
    iterations_per_s: float | None = None
    """The training's steady iterations per second (its busiest loader's batches)."""
    samples_per_s: float | None = None
    data_wait_fraction: float | None = None
    """Share of each steady iteration spent blocked waiting for a batch."""
    step_ms: Percentiles | None = None
    """The step between two batches: ``p50``, ``p95`` (ms)."""
    startup_s: float | None = None
    """From the loader's first iterator to its first batch (the workers' start), apart from the window."""
    cpu_percent: float | None = None
    """CPU of the training's process tree (100 per core)."""
    peak_memory_bytes: int | None = None
    wall_s: float = 0.0
    gpu_util_percent: float | None = None
    """The GPU's utilisation over the run, when the training used one (NVML); None otherwise."""
    ranks: tuple[TuneRank, ...] = ()
    """With ``--nproc-per-node``: each rank's figures; the trial's own figures are the slowest rank's (the step
    waits for it), its CPU and memory every rank's together."""
    stderr_tail: tuple[str, ...] = ()
    """A failed run: the last lines the script wrote to its stderr (its traceback's end)."""
    stderr_causes: tuple[str, ...] = ()
    """A failed run: the lines anywhere in its stderr that name a cause of :data:`CAUSE_WORDS` (a worker's bus
    error stands above torch's chained traceback, out of the tail)."""
    epoch_samples: int | None = None
    """The samples of the loader's first epoch that ran out in this run; None when none did."""
    warmup_wait_fraction: float | None = None
    """Share of the loader's whole time spent waiting at the starts of its epochs after the first (their first
    batch and the rest of their warm-up; the first epoch's start is the training's start-up, ``startup_s``): what
    the steady ``data_wait_fraction`` leaves out, and more workers shorten. None with one epoch."""
    no_training: bool = False
    """The run delivered no training batch (an evaluation before the training, longer than the run): the next
    run's start-up allowance is longer."""
    node_knobs: dict[str, KnobValues] = field(default_factory=dict)
    """Across nodes, where one node's loader had knobs of its own: those knobs, on top of ``config``, by the
    node's index (``{"1": {"num_workers": 1}}``); empty when every node had ``config``."""

    def __post_init__(self) -> None:
        checked_knobs(self, "config")
        object.__setattr__(self, "node_knobs", {str(node): KnobValues(own) for node, own in self.node_knobs.items()})

    @property
    def ok(self) -> bool:
        """Whether it ran and measured a rate."""
        return self.status == TrialStatus.OK and bool(self.iterations_per_s)


@dataclass(frozen=True)
class TunedLoader:
    """The loader tuned: where the script builds it, its class and batch size, and its knobs as the script sets
    them."""

    site: str
    loader_class: str = field(metadata=named("class"))
    batch_size: int | None = None
    settings: KnobValues = field(default_factory=KnobValues)
    device: str = "cpu"
    """Where the training ran in its first run: ``cpu`` or ``cuda:N``."""
    threads: str | None = None
    """What can load its batches with threads of the training process (``worker_method`` of the DataLoader,
    ``torchdata.nodes``), when its dataset is map-style; None: thread workers are not tried."""
    start_methods: tuple[str, ...] = ()
    """The start methods its worker processes may take here (torch); none: the start method is not tried."""
    batch_bytes: int | None = None
    """The bytes of one of its batches (its tensors'): what a worker puts in /dev/shm per batch in flight."""
    shm_free_bytes: int | None = None
    """Free space in /dev/shm where the training ran."""
    split: str | None = None
    """The split it serves, where its framework says (``train``)."""
    built_by: tuple[str, ...] = ()
    """The library functions that built it for the user's line (``module:qualname``, innermost first)."""
    iterable: bool = False
    """Whether its dataset is a stream (an IterableDataset): a change of its workers is recommended only when
    an epoch holds the same samples with them."""
    available_ram_bytes: int | None = None
    """The memory available where the training ran: the climb stops before its workers would take it."""

    def __post_init__(self) -> None:
        checked_knobs(self, "settings")


@dataclass(frozen=True)
class LoaderSweep:
    """The loader-only answer: ``dataprof sweep`` of the function that builds the tuned loader, beside a dummy
    model stepping as the training's step does with data for free; what it picked, to run in the training."""

    target: str
    """What was swept (``train.py:make_loader``), and its arguments."""
    args: dict[str, Any] = field(default_factory=dict)
    step_ms: float | None = None
    """The dummy model's step: the training's step p50 with data for free."""
    config: KnobValues | None = None
    """The sweep's pick as the knobs to set on the training's loader (those that differ from the script's)."""
    label: str | None = None
    """The pick as the sweep names it (``w4 pf2 persist``)."""
    samples_per_s: float | None = None
    """The pick's rate beside the dummy model."""
    error: str | None = None
    """Why the sweep gave no pick (it failed, or its pick cannot be set on the training's loader)."""

    def __post_init__(self) -> None:
        if self.config is not None:
            checked_knobs(self, "config")


@dataclass(frozen=True)
class TuneAnswer:
    """What the trials say (decided by ``dataprof.decide.tune``): the config to use, its gain over the script's
    own with its range, and what data loading costs the training before and after."""

    recommended: int | None
    """Index of the recommended config's first run in the report's ``trials``; None when no config other than
    the script's own completed (nothing was compared: ``reason`` says why)."""
    gain_over_current: float | None
    """Its iterations/s over the current config's, less one."""
    gain_range: tuple[float, float] | None
    """That gain's range at the runs' noise: what the runs show of it (the recommended config's runs against the
    script's own)."""
    data_cost_fraction: float | None
    """``1 − current ÷ headspace``: the share of the training's speed that data loading costs now."""
    recommended_data_cost_fraction: float | None
    noise: float
    """The runs' relative noise: the spread of the current config's repeats (or the floor)."""
    reason: str
    step_slowdown: dict[int, float] = field(default_factory=dict)
    """Per trial index: its step p50 over the headspace's, less one (workers competing with the step for CPUs)."""
    loader_sweep_rank: tuple[int, int] | None = None
    """Where the training ranked the loader-only sweep's pick: its place among the configs run, of how many."""
    loader_sweep_vs_recommended: float | None = None
    """The pick's iterations/s in the training over the recommended config's, less one."""
    leading: int | None = None
    """Index of the first run of the config the search leads with (run once, it may not be recommended yet)."""
    noise_freedom: int = 0
    """The degrees of freedom ``noise`` was pooled over (the runs of configs run more than once, less one each):
    the fewer, the wider a range at that noise."""
    verdict: TuneVerdict = TuneVerdict.CHANGE
    """The kind of answer: a change, keep yours, cannot tell, or nothing compared."""
    data_cost_range: tuple[float, float] | None = None
    """The range of ``data_cost_fraction`` at the runs' noise (the script's own runs against the headspace's)."""
    ceiling: float | None = None
    """The training's iterations/s with data for free: the median of the headspace's runs, on the script's pace."""


def _answer_json(report: TuneReport) -> dict[str, Any]:
    """The answer's keys in the ``dataprof tune --json`` document (docs/tune.md): the current, recommended and
    headspace runs' figures, the verdict and what it rests on (a document read back is decided again)."""
    answer = report.answer
    current, headspace = report.by_role("current"), report.by_role("headspace")
    recommended = None if answer is None or answer.recommended is None else report.trials[answer.recommended]
    return {
        "current": None if not current else _figures(current[0]),
        "recommended": None if recommended is None or answer is None else
        {**_figures(recommended), "gain_over_current": answer.gain_over_current,
         "gain_range": None if answer.gain_range is None else list(answer.gain_range)},
        "headspace": None if not headspace else {"iterations_per_s": headspace[0].iterations_per_s
                                                 if answer is None or answer.ceiling is None else answer.ceiling,
                                                 "step_ms": encode(headspace[0].step_ms), "runs": len(headspace)},
        "verdict": None if answer is None else answer.verdict,
        "data_cost_fraction": None if answer is None else answer.data_cost_fraction,
        "data_cost_range": None if answer is None or answer.data_cost_range is None
        else list(answer.data_cost_range),
        "recommended_data_cost_fraction": None if answer is None else answer.recommended_data_cost_fraction,
        "noise": None if answer is None else answer.noise,
        "noise_freedom": None if answer is None else answer.noise_freedom,
        "reason": None if answer is None else answer.reason,
        "step_slowdown": None if answer is None else {str(k): v for k, v in answer.step_slowdown.items()},
        "recommended_index": None if answer is None else answer.recommended,
    }


def _loader_sweep_json(report: TuneReport) -> dict[str, Any] | None:
    """The loader-only sweep, with where its pick ranked in the training."""
    answer = report.answer
    return None if report.loader_sweep is None else {
        **encode(report.loader_sweep),
        "rank_in_training": None if answer is None or answer.loader_sweep_rank is None
        else list(answer.loader_sweep_rank),
        "vs_recommended": None if answer is None else answer.loader_sweep_vs_recommended}


@dataclass(frozen=True)
class TuneReport(Document):
    """A ``dataprof tune``: the command, the loader tuned, every run, and the answer (``--json``: docs/tune.md)."""

    KIND: ClassVar[str | None] = Kind.TUNE
    HEADER: ClassVar[tuple[str, ...]] = ("kind", "tool")
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "command", "nproc_per_node", "nnodes", "complete", "loader", "current", "recommended", "headspace", "verdict",
        "data_cost_fraction", "data_cost_range", "recommended_data_cost_fraction", "noise", "noise_freedom",
        "reason", "step_slowdown", "trials", "wall_s", "notes", "error", "recommended_index", "loader_sweep")
    tool_version: str = field(metadata=HIDDEN)
    command: tuple[str, ...]
    loader: TunedLoader | None
    trials: tuple[TuneTrial, ...]
    wall_s: float
    complete: bool = True
    answer: TuneAnswer | None = field(default=None, metadata={**FLAT, **view(_answer_json, lambda data: None)})
    """The answer (``decide.tune``): a document read back is decided again from its runs."""
    notes: tuple[str, ...] = ()
    error: str | None = None
    """Why tuning stopped without an answer (the current config failing, no loader found)."""
    loader_sweep: LoaderSweep | None = field(default=None, metadata=view(_loader_sweep_json))
    """The loader-only sweep, when the tuned loader's factory could be swept alone."""
    nproc_per_node: int = 1
    """Ranks of each run (``--nproc-per-node``), run together on this machine."""
    nnodes: int = 1
    """Nodes each run spans (``--nnodes``): on each, ``nproc_per_node`` ranks."""

    def by_role(self, role: str) -> list[TuneTrial]:
        """The completed trials of ``role``."""
        return [t for t in self.trials if t.role == role and t.ok]


def _figures(trial: TuneTrial) -> dict[str, Any]:
    return {"config": encode(trial.config), "node_knobs": encode(trial.node_knobs),
            "iterations_per_s": trial.iterations_per_s, "samples_per_s": trial.samples_per_s,
            "data_wait_fraction": trial.data_wait_fraction,
            "step_ms": encode(trial.step_ms)}

"""Result data: what a sweep measured, as frozen dataclasses with a JSON form.

Stdlib only. ``Report.to_dict()`` is the documented ``--json`` document
(docs/json.md); ``Report.from_dict()`` reads it back for ``dataprof diagnose``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from dataprof.config import LoaderConfig

SCHEMA_VERSION = 1

STATUSES = ("ok", "failed", "timeout", "oom", "crashed", "skipped")


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(document: dict[str, Any]) -> str:
    """A result document (a sweep's or an inspect run's) as indented JSON text, one trailing newline."""
    return json.dumps(_finite(document), indent=2) + "\n"


@dataclass(frozen=True)
class WaitStats:
    """Time the training loop spent blocked in ``next(loader)``, per batch (ms)."""

    p50: float
    p95: float
    max: float
    p99: float | None = None
    mean: float | None = None


@dataclass(frozen=True)
class RankResult:
    """One rank's share of a distributed trial (rank 0 aggregates them)."""

    rank: int
    node: int
    local_rank: int
    host: str
    status: str
    error: str | None = None
    samples_per_s: float | None = None
    samples_per_s_spread: float | None = None
    wait_fraction: float | None = None
    first_batch_s: float | None = None
    cpu_percent: float | None = None
    """CPU of this rank's loader processes (main + workers); 100 = one core."""
    peak_memory_bytes: int | None = None

    @classmethod
    def of(cls, trial: TrialResult, rank: int, node: int, local_rank: int, host: str) -> RankResult:
        return cls(rank=rank, node=node, local_rank=local_rank, host=host, status=trial.status, error=trial.error,
                   samples_per_s=trial.samples_per_s, samples_per_s_spread=trial.samples_per_s_spread,
                   wait_fraction=trial.wait_fraction, first_batch_s=trial.first_batch_s,
                   cpu_percent=trial.cpu_percent, peak_memory_bytes=trial.peak_memory_bytes)


@dataclass(frozen=True)
class TrialResult:
    """One configuration, measured in its own process."""

    config: LoaderConfig
    status: str
    """One of :data:`STATUSES`."""
    error: str | None = None
    """One-line reason when status is not ``ok``."""
    samples_per_s: float | None = None
    """Samples delivered in the steady-state window / window wall time."""
    samples_per_s_spread: float | None = None
    """Relative standard error of the rate across sub-windows (0.02 = ±2%)."""
    first_batch_s: float | None = None
    """Loader creation to first batch: worker start-up, reported apart."""
    wait_fraction: float | None = None
    """Share of the window the loop was blocked waiting for data."""
    wait_ms: WaitStats | None = None
    wait_cpu_ms_mean: float | None = None
    """Main-thread CPU inside ``next()`` per batch: receiving and unpickling a
    worker's batch, or the whole load when ``num_workers=0``."""
    receive_ms_mean: float | None = None
    """Main-process time per batch unpickling it from a worker (rebuilding its tensors and objects)."""
    sampler_ms_mean: float | None = None
    """Time in the batch sampler per batch (it runs in the main process)."""
    copy_ms_mean: float | None = None
    """Host-to-device copy per batch (0 on the simulated device)."""
    step_ms_mean: float | None = None
    """Dummy model step per batch."""
    batches: int | None = None
    """Batches in the timed window."""
    samples: int | None = None
    """Samples in the timed window."""
    window_s: float | None = None
    worker_processes: int | None = None
    """Worker processes the loader really started (0 when the framework loaded in the main process)."""
    epochs_started: int | None = None
    """Epochs begun from loader creation to the end of the window."""
    epoch_samples: int | None = None
    """Samples the first epoch yielded, when it ended within the trial."""
    epoch_starts_in_window: int | None = None
    """Epochs begun inside the timed window."""
    epoch_start_wait_s: float | None = None
    """Time the loop waited for the first batch of those epochs: workers restarting or refilling at each start."""
    repeat_fraction: float | None = None
    """IterableDataset only: share of the warm-up batches (first epoch) identical to an earlier one."""
    rank_repeat_fraction: float | None = None
    """Distributed, IterableDataset only: share of the ranks' first batches that another rank loaded too."""
    batch_marks: tuple[int, ...] = ()
    """IterableDataset only: fingerprints of the first batches, to compare ranks' streams (not in the JSON)."""
    cpu_percent: float | None = None
    """CPU of the trial's process tree in the window; 100 = one core busy."""
    main_cpu_percent: float | None = None
    """CPU of the main process alone (all its threads, e.g. pin_memory's)."""
    main_thread_cpu_percent: float | None = None
    """CPU of the main process's main thread (the training loop)."""
    cpu_percent_system: float | None = None
    """Whole-machine CPU in the window, % of all CPUs."""
    iowait_percent: float | None = None
    peak_memory_bytes: int | None = None
    """Peak PSS of main process + workers (shared pages counted once)."""
    main_uss_bytes: int | None = None
    workers_uss_start_bytes: int | None = None
    """Sum of worker USS at the first sample of the window."""
    workers_uss_end_bytes: int | None = None
    """Sum of worker USS at the last sample."""
    workers_inherited_growth_bytes: int | None = None
    """Growth over the window of the workers' dirty private pages in mappings inherited from the main process:
    its pages copied as they are written (copy-on-read when reading Python objects writes their refcounts)."""
    workers_file_growth_bytes: int | None = None
    """Growth over the window of the workers' clean private pages of memory-mapped files (data read, not
    copied)."""
    available_memory_min_bytes: int | None = None
    gpu_util_percent: float | None = None
    """NVML utilisation over the window; None without an NVIDIA GPU."""
    gpu_memory_bytes: int | None = None
    duration_s: float | None = None
    """Whole trial, process start to exit."""
    build_s: float | None = None
    """Seconds the trial spent building the dataset before its DataLoader; None when it was forked with the
    dataset built (see ``DatasetInfo.build``)."""
    ranks: tuple[RankResult, ...] = ()
    """Distributed sweeps: each rank's measurement; the figures above are the pace-setting (slowest) rank's,
    and ``samples_per_s`` is world size × its rate, as synchronous training would run."""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["config"] = self.config.to_dict()
        data["ranks"] = [dataclasses.asdict(r) for r in self.ranks]
        del data["batch_marks"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["config"] = LoaderConfig.from_dict(data["config"])
        if values.get("wait_ms") is not None:
            values["wait_ms"] = WaitStats(**values["wait_ms"])
        values["ranks"] = tuple(RankResult(**r) for r in data.get("ranks") or ())
        return cls(**values)


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

    @property
    def framework_version(self) -> str | None:
        return self.paddle if self.framework == "paddle" else self.torch

    @property
    def simulated_device(self) -> bool:
        return not self.device.startswith("cuda")


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


@dataclass(frozen=True)
class Recommendation:
    """The config to use, and why it was chosen over the fastest one."""

    config: LoaderConfig
    samples_per_s: float
    speedup_vs_baseline: float | None
    fastest: LoaderConfig
    fastest_samples_per_s: float
    reason: str
    cpu_ceiling_samples_per_s: float | None = None
    """What the usable CPUs could load at the recommended config's CPU cost per sample."""

    @property
    def cpu_ceiling_share(self) -> float | None:
        """How close the recommendation gets to the CPU ceiling."""
        return self.samples_per_s / self.cpu_ceiling_samples_per_s if self.cpu_ceiling_samples_per_s else None


@dataclass(frozen=True)
class SearchStep:
    """One trial of the search, in the order run, and why the strategy chose it."""

    config: LoaderConfig
    why: str


@dataclass(frozen=True)
class RuleOfThumb:
    """What a common rule of thumb picks, measured in the same run."""

    rule: str
    config: LoaderConfig
    status: str | None
    """The trial's status; None when it was not measured (the budget forbade it, or the sweep stopped)."""
    samples_per_s: float | None
    recommended_speedup: float | None
    """Recommended throughput ÷ this one."""
    within_noise: bool = False
    """The recommendation is not faster beyond the measurement noise: the advice is right here."""


@dataclass(frozen=True)
class AutotuneRun:
    """What Paddle's own dataloader autotune (``paddle.incubate.autotune``) picked, run in this sweep."""

    status: str
    """``ok``, ``failed`` or ``timeout``."""
    num_workers: int | None = None
    """Its pick; the sweep measures ``paddle.io.DataLoader``'s defaults with it."""
    tuning_steps: int = 0
    """Batches it timed per worker count tried."""
    wall_s: float | None = None
    """How long the autotune took (it runs when the DataLoader is built)."""
    max_workers: float | None = None
    """It tries 0, 2, 4, … below this: ``multiprocessing.cpu_count() / 2``, affinity and quotas ignored."""
    evaluations: tuple[tuple[int, float], ...] = ()
    """(num_workers, mean seconds per batch) as it logged them, in the order tried."""
    error: str | None = None
    skipped: str | None = None
    """Why it tuned nothing, when it did not start (it keeps ``num_workers`` as given)."""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["evaluations"] = [{"num_workers": w, "batch_s": s} for w, s in self.evaluations]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AutotuneRun:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["evaluations"] = tuple((int(e["num_workers"]), float(e["batch_s"]))
                                      for e in data.get("evaluations") or ())
        return cls(**values)


@dataclass(frozen=True)
class GateResult:
    """One CI gate (``--min-throughput``, …): passed or not, and the numbers it compared."""

    gate: str
    passed: bool
    measured: float | None
    threshold: float
    message: str


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    """``info`` | ``warning`` | ``critical``."""
    evidence: str
    recommendation: str


@dataclass(frozen=True)
class Report:
    """A whole sweep: the session object every renderer reads."""

    target: str
    tool_version: str
    environment: Environment
    settings: dict[str, Any]
    trials: tuple[TrialResult, ...]
    dataset: DatasetInfo | None = None
    recommendation: Recommendation | None = None
    primary: str | None = None
    findings: tuple[Finding, ...] = ()
    wall_s: float = 0.0
    complete: bool = True
    """False while a sweep is running or after it was interrupted."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    search_steps: tuple[SearchStep, ...] = ()
    search_stop: str | None = None
    """Why the search stopped."""
    rules_of_thumb: tuple[RuleOfThumb, ...] = ()
    gates: tuple[GateResult, ...] = ()
    autotune: AutotuneRun | None = None
    """Paddle sweeps: what Paddle's own dataloader autotune picked in this run."""
    error: str | None = None
    """Why the sweep ended without a result (the one line printed with exit code 3); None otherwise."""

    @property
    def best(self) -> Recommendation | None:
        """The recommended configuration (None when nothing completed)."""
        return self.recommendation

    @property
    def diagnosis(self) -> dict[str, Any]:
        """``{"primary": ..., "findings": [...]}``, as in the JSON document."""
        return {"primary": self.primary, "findings": [dataclasses.asdict(f) for f in self.findings]}

    def to_json(self) -> str:
        """The ``--json`` document as text (NaN and infinities written as null)."""
        return to_json(self.to_dict())

    @property
    def baseline(self) -> TrialResult | None:
        for trial in self.trials:
            if trial.config.is_baseline and trial.status == "ok":
                return trial
        return None

    def to_dict(self) -> dict[str, Any]:
        baseline = self.baseline
        best = self.recommendation
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "dataprof", "version": self.tool_version},
            "target": self.target,
            "complete": self.complete,
            "environment": dataclasses.asdict(self.environment),
            "dataset": None if self.dataset is None else dataclasses.asdict(self.dataset),
            "settings": dict(self.settings),
            "trials": [t.to_dict() for t in self.trials],
            "baseline": None if baseline is None else {
                "config": baseline.config.to_dict(), "samples_per_s": baseline.samples_per_s},
            "best": None if best is None else {
                "config": best.config.to_dict(),
                "samples_per_s": best.samples_per_s,
                "speedup_vs_baseline": best.speedup_vs_baseline,
                "fastest": {"config": best.fastest.to_dict(), "samples_per_s": best.fastest_samples_per_s},
                "reason": best.reason,
                "cpu_ceiling_samples_per_s": best.cpu_ceiling_samples_per_s,
                "cpu_ceiling_share": best.cpu_ceiling_share,
            },
            "diagnosis": self.diagnosis,
            "gates": [dataclasses.asdict(g) for g in self.gates],
            "search": {"strategy": self.settings.get("strategy"), "trials_run": len(self.trials),
                       "wall_s": self.wall_s,
                       "steps": [{"config": step.config.to_dict(), "why": step.why} for step in self.search_steps],
                       "stopped": self.search_stop},
            "rules_of_thumb": [{"rule": r.rule, "config": r.config.to_dict(), "status": r.status,
                                "samples_per_s": r.samples_per_s, "recommended_speedup": r.recommended_speedup,
                                "within_noise": r.within_noise} for r in self.rules_of_thumb],
            "autotune": None if self.autotune is None else self.autotune.to_dict(),
            "notes": list(self.notes),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        env_fields = {f.name for f in dataclasses.fields(Environment)}
        best = data.get("best")
        recommendation = None
        if best is not None:
            recommendation = Recommendation(
                config=LoaderConfig.from_dict(best["config"]),
                samples_per_s=best["samples_per_s"],
                speedup_vs_baseline=best.get("speedup_vs_baseline"),
                fastest=LoaderConfig.from_dict(best.get("fastest", best)["config"]),
                fastest_samples_per_s=best.get("fastest", best)["samples_per_s"],
                reason=best.get("reason", ""),
                cpu_ceiling_samples_per_s=best.get("cpu_ceiling_samples_per_s"),
            )
        diagnosis = data.get("diagnosis") or {}
        dataset = data.get("dataset")
        return cls(
            target=data["target"],
            tool_version=data.get("tool", {}).get("version", "?"),
            environment=Environment(**{k: v for k, v in data["environment"].items() if k in env_fields}),
            settings=dict(data.get("settings", {})),
            trials=tuple(TrialResult.from_dict(t) for t in data.get("trials", [])),
            dataset=None if dataset is None else DatasetInfo(**dataset),
            recommendation=recommendation,
            primary=diagnosis.get("primary"),
            findings=tuple(Finding(**f) for f in diagnosis.get("findings", [])),
            wall_s=data.get("search", {}).get("wall_s", 0.0),
            search_steps=tuple(SearchStep(LoaderConfig.from_dict(step["config"]), step["why"])
                               for step in data.get("search", {}).get("steps", [])),
            search_stop=data.get("search", {}).get("stopped"),
            gates=tuple(GateResult(**g) for g in data.get("gates", [])),
            complete=data.get("complete", True),
            notes=tuple(data.get("notes", [])),
            error=data.get("error"),
            autotune=None if data.get("autotune") is None else AutotuneRun.from_dict(data["autotune"]),
            rules_of_thumb=tuple(RuleOfThumb(rule=r["rule"], config=LoaderConfig.from_dict(r["config"]),
                                             status=r.get("status"), samples_per_s=r.get("samples_per_s"),
                                             recommended_speedup=r.get("recommended_speedup"),
                                             within_noise=bool(r.get("within_noise")))
                                 for r in data.get("rules_of_thumb", [])),
        )

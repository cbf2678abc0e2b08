"""A sweep's document: its Report and the decisions it carries, as frozen dataclasses with a JSON form.

Stdlib only. The trials' own figures live in :mod:`dataprof.results.trial`, the machine's in
:mod:`dataprof.results.environment`. ``Report.to_dict()`` is the documented ``--json`` document
(docs/json.md); ``Report.from_dict()`` reads it back for ``dataprof diagnose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from dataprof.results.cache import DataFootprint, StorageOutlook
from dataprof.results.codec import FLAT, HIDDEN, decode, encode, named, objects, records, view
from dataprof.results.document import SETTINGS_KEYS, Document, settings_view
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.findings import Finding, GateResult
from dataprof.results.knobs import LoaderConfig
from dataprof.results.pipeline import PipelineModel
from dataprof.results.plan import Feeding
from dataprof.results.settings import SweepSettings
from dataprof.results.threads import ThreadCheck, WorkerKinds
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import CacheMode, FindingId, TrialStatus


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
    cache: str = "warm"
    """The figures it was chosen on: ``cold`` when every epoch of the training reads from storage."""

    @property
    def cpu_ceiling_share(self) -> float | None:
        """How close the recommendation gets to the CPU ceiling."""
        return self.samples_per_s / self.cpu_ceiling_samples_per_s if self.cpu_ceiling_samples_per_s else None


@dataclass(frozen=True)
class SearchStep:
    """One trial of the search, in the order run, and why the strategy chose it."""

    config: LoaderConfig
    why: str
    cache: str = "warm"
    """``cold`` for a cold trial (:attr:`Report.cold_trials`)."""


@dataclass(frozen=True)
class RuleOfThumb:
    """What a common rule of thumb picks, measured in the same run."""

    rule: str
    config: LoaderConfig
    status: TrialStatus | None
    """The trial's status; None when it was not measured (the budget forbade it, or the sweep stopped)."""
    samples_per_s: float | None
    recommended_speedup: float | None
    """Recommended throughput ÷ this one."""
    within_noise: bool = False
    """The recommendation is not faster beyond the measurement noise: the trials cannot tell the two apart (the
    advice is right here when its config is the one recommended)."""


@dataclass(frozen=True)
class YourSettings:
    """The user's own settings (their DataLoader's, or ``--current``), measured in the same run."""

    source: str
    """The loader's class name, or ``--current``."""
    config: LoaderConfig
    status: TrialStatus | None
    """The trial's status; None when it was not measured (the sweep stopped first)."""
    samples_per_s: float | None
    recommended_speedup: float | None
    """Recommended throughput ÷ yours."""
    within_noise: bool = False
    """The recommendation is not faster beyond the measurement noise: keep yours."""
    changes: tuple[str, ...] = ()
    """The knobs the recommendation sets differently, by the framework's own names."""


@dataclass(frozen=True)
class AutotuneRun:
    """What Paddle's own dataloader autotune (``paddle.incubate.autotune``) picked, run in this sweep."""

    status: TrialStatus
    """``ok``, ``failed``, ``timeout`` or ``crashed``."""
    num_workers: int | None = None
    """Its pick; the sweep measures ``paddle.io.DataLoader``'s defaults with it."""
    tuning_steps: int = 0
    """Batches it timed per worker count tried."""
    wall_s: float | None = None
    """How long the autotune took (it runs when the DataLoader is built)."""
    max_workers: float | None = None
    """It tries 0, 2, 4, … below this: ``multiprocessing.cpu_count() / 2``, affinity and quotas ignored."""
    evaluations: tuple[tuple[int, float], ...] = field(default=(), metadata=objects("num_workers", "batch_s"))
    """(num_workers, mean seconds per batch) as it logged them, in the order tried."""
    error: str | None = None
    skipped: str | None = None
    """Why it tuned nothing, when it did not start (it keeps ``num_workers`` as given)."""


def _best_json(report: Report) -> dict[str, Any]:
    """The ``baseline`` and ``best`` blocks: each config by its framework's names beside its figures."""
    baseline, best = report.baseline, report.recommendation
    return {
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
            "cache": best.cache,
        }}


def _best_from(data: Mapping[str, Any]) -> Recommendation | None:
    best = data.get("best")
    if best is None:
        return None
    fastest = best.get("fastest", best)
    return decode(Recommendation, {**best, "fastest": fastest["config"],
                                   "fastest_samples_per_s": fastest["samples_per_s"],
                                   "reason": best.get("reason", "")})


def _search_json(report: Report) -> dict[str, Any]:
    return {"strategy": report.settings.strategy, "trials_run": len(report.trials), "wall_s": report.wall_s,
            "steps": encode(report.search_steps), "stopped": report.search_stop}


def _in(block: str, key: str, read: Callable[[Any], Any] = lambda value: value,
        default: Any = None) -> Callable[[Mapping[str, Any]], Any]:
    """Reads a field its document holds as ``key`` in its ``block`` (which another field's view writes), with
    ``read``."""
    return lambda data: read((data.get(block) or {}).get(key, default))


@dataclass(frozen=True)
class Report(Document):
    """A whole sweep: the session object every renderer reads (``--json``: docs/json.md)."""

    HEADER: ClassVar[tuple[str, ...]] = ("tool",)
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "target", "complete", "environment", "dataset", "settings", "trials", "baseline", "best", "diagnosis",
        "gates", "search", "current", "rules_of_thumb", "autotune", "notes", "error", "model", "feeding",
        "cold_trials", "data_footprint", "storage", "thread_check", "worker_kinds")
    target: str
    tool_version: str = field(metadata=HIDDEN)
    environment: Environment
    settings: SweepSettings = field(metadata=settings_view(SweepSettings))
    trials: tuple[TrialResult, ...]
    dataset: DatasetInfo | None = None
    recommendation: Recommendation | None = field(default=None, metadata={**FLAT, **view(_best_json, _best_from)})
    primary: FindingId | None = field(default=None, metadata=view(
        lambda report: report.diagnosis, _in("diagnosis", "primary", lambda p: None if p is None else FindingId(p)),
        **named("diagnosis")))
    findings: tuple[Finding, ...] = field(default=(), metadata={
        **HIDDEN, **view(read=_in("diagnosis", "findings", partial(records, Finding)))})
    wall_s: float = field(default=0.0, metadata=view(_search_json, _in("search", "wall_s", default=0.0),
                                                     **named("search")))
    complete: bool = True
    """False while a sweep is running or after it was interrupted."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    search_steps: tuple[SearchStep, ...] = field(default=(), metadata={
        **HIDDEN, **view(read=_in("search", "steps", partial(records, SearchStep)))})
    search_stop: str | None = field(default=None, metadata={**HIDDEN, **view(read=_in("search", "stopped"))})
    """Why the search stopped."""
    rules_of_thumb: tuple[RuleOfThumb, ...] = ()
    gates: tuple[GateResult, ...] = ()
    autotune: AutotuneRun | None = None
    """Paddle sweeps: what Paddle's own dataloader autotune picked in this run."""
    error: str | None = None
    """Why the sweep ended without a result (the one line printed with exit code 3); None otherwise."""
    current: YourSettings | None = None
    """The user's own settings against the recommendation, when the target carried them (or ``--current``)."""
    model: PipelineModel | None = None
    """The pipeline's costs fitted from the trials, from which ``dataprof plan`` predicts other machines."""
    feeding: Feeding | None = None
    """With a model step (``--step-ms``): what feeding it takes on a rank, by the model."""
    cold_trials: tuple[TrialResult, ...] = ()
    """Configs measured again cold: the data files the trials read evicted from the page cache first."""
    data_footprint: DataFootprint | None = None
    """The data files the trials read and the dataset they belong to; None when they read none."""
    storage: StorageOutlook | None = None
    """Which case the training is in (cold every epoch, or only the first) and the epoch forecast."""
    thread_check: ThreadCheck | None = None
    """Whether the thread loader returned the samples one process does, checked before the thread trials."""
    worker_kinds: WorkerKinds | None = None
    """The fastest thread config beside the fastest process config, when both completed."""
    settings_keys: tuple[str, ...] | None = field(default=None, metadata=SETTINGS_KEYS)
    """The ``settings`` keys of the document this was read from, in its order: written back as read (an older
    document's keys, no more); None for a sweep made here, whose settings are written whole."""

    @property
    def best(self) -> Recommendation | None:
        """The recommended configuration (None when nothing completed)."""
        return self.recommendation

    @property
    def diagnosis(self) -> dict[str, Any]:
        """``{"primary": ..., "findings": [...]}``, as in the JSON document."""
        return {"primary": self.primary, "findings": encode(self.findings)}

    @property
    def recommended_pool(self) -> tuple[TrialResult, ...]:
        """The trials the recommendation was chosen among: the cold ones when it was made cold."""
        cold = self.recommendation is not None and self.recommendation.cache == CacheMode.COLD
        return self.cold_trials if cold else self.trials

    @property
    def baseline(self) -> TrialResult | None:
        """The completed trial of the framework's default loader (``num_workers=0``), if any."""
        for trial in self.trials:
            if trial.config.is_baseline and trial.status == TrialStatus.OK:
                return trial
        return None

"""A sweep's document: its Report and the decisions it carries, as frozen dataclasses with a JSON form.

Stdlib only. The trials' own figures live in :mod:`dataprof.results.trial`, the machine's in
:mod:`dataprof.results.environment`. ``Report.to_dict()`` is the documented ``--json`` document
(docs/json.md); ``Report.from_dict()`` reads it back for ``dataprof diagnose``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.cache import DataFootprint, StorageOutlook
from dataprof.results.document import SCHEMA_VERSION, kept, to_json
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.findings import Finding, GateResult
from dataprof.results.knobs import LoaderConfig
from dataprof.results.pipeline import PipelineModel
from dataprof.results.plan import Feeding
from dataprof.results.settings import SweepSettings
from dataprof.results.threads import ThreadCheck, WorkerKinds
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import CacheMode, FindingId, TrialStatus


def _status(value: str | None) -> TrialStatus | None:
    """A status read back from a document (None kept: not measured)."""
    return None if value is None else TrialStatus(value)


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
    """The recommendation is not faster beyond the measurement noise: the advice is right here."""


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

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``current`` block (docs/json.md)."""
        return {"source": self.source, "config": self.config.to_dict(), "status": self.status,
                "samples_per_s": self.samples_per_s, "recommended_speedup": self.recommended_speedup,
                "within_noise": self.within_noise, "changes": list(self.changes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> YourSettings:
        """Read :meth:`to_dict` back."""
        return cls(source=data["source"], config=LoaderConfig.from_dict(data["config"]),
                   status=_status(data.get("status")), samples_per_s=data.get("samples_per_s"),
                   recommended_speedup=data.get("recommended_speedup"), within_noise=bool(data.get("within_noise")),
                   changes=tuple(data.get("changes") or ()))


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
    evaluations: tuple[tuple[int, float], ...] = ()
    """(num_workers, mean seconds per batch) as it logged them, in the order tried."""
    error: str | None = None
    skipped: str | None = None
    """Why it tuned nothing, when it did not start (it keeps ``num_workers`` as given)."""

    def to_dict(self) -> dict[str, Any]:
        """The run as the JSON document's ``autotune`` holds it."""
        data = dataclasses.asdict(self)
        data["evaluations"] = [{"num_workers": w, "batch_s": s} for w, s in self.evaluations]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AutotuneRun:
        """Read :meth:`to_dict` back."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["evaluations"] = tuple((int(e["num_workers"]), float(e["batch_s"]))
                                      for e in data.get("evaluations") or ())
        values["status"] = TrialStatus(data["status"])
        return cls(**values)


@dataclass(frozen=True)
class Report:
    """A whole sweep: the session object every renderer reads."""

    target: str
    tool_version: str
    environment: Environment
    settings: SweepSettings
    trials: tuple[TrialResult, ...]
    dataset: DatasetInfo | None = None
    recommendation: Recommendation | None = None
    primary: FindingId | None = None
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
    settings_keys: tuple[str, ...] | None = None
    """The ``settings`` keys of the document this was read from, in its order: written back as read (an older
    document's keys, no more); None for a sweep made here, whose settings are written whole."""

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

    def settings_document(self) -> dict[str, Any]:
        """The JSON ``settings``: whole, or the keys the document read held (:attr:`settings_keys`)."""
        return kept(self.settings.to_dict(), self.settings_keys)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (docs/json.md), ``schema_version`` first."""
        baseline = self.baseline
        best = self.recommendation
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "dataprof", "version": self.tool_version},
            "target": self.target,
            "complete": self.complete,
            "environment": dataclasses.asdict(self.environment),
            "dataset": None if self.dataset is None else dataclasses.asdict(self.dataset),
            "settings": self.settings_document(),
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
                "cache": best.cache,
            },
            "diagnosis": self.diagnosis,
            "gates": [dataclasses.asdict(g) for g in self.gates],
            "search": {"strategy": self.settings.strategy, "trials_run": len(self.trials),
                       "wall_s": self.wall_s,
                       "steps": [{"config": step.config.to_dict(), "why": step.why, "cache": step.cache}
                                 for step in self.search_steps],
                       "stopped": self.search_stop},
            "current": None if self.current is None else self.current.to_dict(),
            "rules_of_thumb": [{"rule": r.rule, "config": r.config.to_dict(), "status": r.status,
                                "samples_per_s": r.samples_per_s, "recommended_speedup": r.recommended_speedup,
                                "within_noise": r.within_noise} for r in self.rules_of_thumb],
            "autotune": None if self.autotune is None else self.autotune.to_dict(),
            "notes": list(self.notes),
            "error": self.error,
            "model": None if self.model is None else self.model.to_dict(),
            "feeding": None if self.feeding is None else dataclasses.asdict(self.feeding),
            "cold_trials": [t.to_dict() for t in self.cold_trials],
            "data_footprint": None if self.data_footprint is None else self.data_footprint.to_dict(),
            "storage": None if self.storage is None else dataclasses.asdict(self.storage),
            "thread_check": None if self.thread_check is None else self.thread_check.to_dict(),
            "worker_kinds": None if self.worker_kinds is None else self.worker_kinds.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a ``--json`` document back (keys added later are optional)."""
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
                cache=best.get("cache", "warm"),
            )
        diagnosis = data.get("diagnosis") or {}
        dataset = data.get("dataset")
        return cls(
            target=data["target"],
            tool_version=data.get("tool", {}).get("version", "?"),
            environment=Environment(**{k: v for k, v in data["environment"].items() if k in env_fields}),
            settings=SweepSettings.from_dict(data.get("settings") or {}, data["target"]),
            settings_keys=tuple(data.get("settings") or {}),
            trials=tuple(TrialResult.from_dict(t) for t in data.get("trials", [])),
            dataset=None if dataset is None else DatasetInfo(**dataset),
            recommendation=recommendation,
            primary=None if diagnosis.get("primary") is None else FindingId(diagnosis["primary"]),
            findings=tuple(Finding.from_dict(f) for f in diagnosis.get("findings", [])),
            wall_s=data.get("search", {}).get("wall_s", 0.0),
            search_steps=tuple(SearchStep(LoaderConfig.from_dict(step["config"]), step["why"],
                                          step.get("cache", "warm"))
                               for step in data.get("search", {}).get("steps", [])),
            search_stop=data.get("search", {}).get("stopped"),
            gates=tuple(GateResult(**g) for g in data.get("gates", [])),
            complete=data.get("complete", True),
            notes=tuple(data.get("notes", [])),
            error=data.get("error"),
            autotune=None if data.get("autotune") is None else AutotuneRun.from_dict(data["autotune"]),
            rules_of_thumb=tuple(RuleOfThumb(rule=r["rule"], config=LoaderConfig.from_dict(r["config"]),
                                             status=_status(r.get("status")), samples_per_s=r.get("samples_per_s"),
                                             recommended_speedup=r.get("recommended_speedup"),
                                             within_noise=bool(r.get("within_noise")))
                                 for r in data.get("rules_of_thumb", [])),
            current=None if data.get("current") is None else YourSettings.from_dict(data["current"]),
            model=None if data.get("model") is None else PipelineModel.from_dict(data["model"]),
            feeding=None if data.get("feeding") is None else Feeding(**data["feeding"]),
            cold_trials=tuple(TrialResult.from_dict(t) for t in data.get("cold_trials") or ()),
            data_footprint=None if data.get("data_footprint") is None
            else DataFootprint.from_dict(data["data_footprint"]),
            storage=None if data.get("storage") is None else StorageOutlook(**data["storage"]),
            thread_check=None if data.get("thread_check") is None else ThreadCheck.from_dict(data["thread_check"]),
            worker_kinds=None if data.get("worker_kinds") is None else WorkerKinds.from_dict(data["worker_kinds"]),
        )

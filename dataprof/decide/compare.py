"""Compare two saved sweeps: per config, the recommendation, and whether the machines match. Pure.

``dataprof compare OLD.json NEW.json`` and ``dataprof sweep --baseline OLD.json``
both use :func:`compare`; a regression is the recommended throughput falling
by more than the threshold. Runs from different environments are compared
all the same, but every verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.results.environment import Environment
from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.settings import LoaderConfig
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult


@dataclass(frozen=True)
class ConfigChange:
    """One config measured in both runs."""

    config: LoaderConfig
    old: TrialResult
    new: TrialResult

    @property
    def change(self) -> float | None:
        """Relative throughput change (−0.12 = 12% slower); None when either did not complete."""
        if not self.old.samples_per_s or not self.new.samples_per_s:
            return None
        return self.new.samples_per_s / self.old.samples_per_s - 1

    def regressed(self, threshold: float) -> bool:
        """This config's throughput fell by more than ``threshold`` (0.1 = 10%)."""
        return self.change is not None and self.change < -threshold


class _RateChange:
    """What both comparisons share: the headline rate old → new, and whether it regressed."""

    environment_changes: tuple[str, ...]

    @property
    def old_rate(self) -> float | None:
        """The old headline samples/s (a sweep's recommendation, a run's busiest loader)."""
        raise NotImplementedError

    @property
    def new_rate(self) -> float | None:
        """The new headline samples/s."""
        raise NotImplementedError

    @property
    def change(self) -> float | None:
        """Relative change of the headline samples/s (−0.12 = 12% slower); None when either has none."""
        if not self.old_rate or self.new_rate is None:
            return None
        return self.new_rate / self.old_rate - 1

    @property
    def same_machine(self) -> bool:
        """Both were measured in the same environment."""
        return not self.environment_changes

    def regressed(self, threshold: float) -> bool:
        """The headline samples/s fell by more than ``threshold`` (0.1 = 10%), or the new one measured none."""
        if self.new_rate is None:
            return self.old_rate is not None
        return self.change is not None and self.change < -threshold


@dataclass(frozen=True)
class Comparison(_RateChange):
    """Two runs side by side: the configs both measured, those only one did, and how the machines differ."""

    old: Report
    new: Report
    common: tuple[ConfigChange, ...]
    only_old: tuple[LoaderConfig, ...]
    only_new: tuple[LoaderConfig, ...]
    environment_changes: tuple[str, ...]
    """``cpu: 2 usable CPUs → 16``, … — empty when the machines match."""

    @property
    def old_rate(self) -> float | None:
        """The old run's recommended samples/s (None when nothing completed)."""
        return self.old.recommendation.samples_per_s if self.old.recommendation else None

    @property
    def new_rate(self) -> float | None:
        """The new run's recommended samples/s (None when nothing completed)."""
        return self.new.recommendation.samples_per_s if self.new.recommendation else None


ENVIRONMENT_FIELDS = (("usable_cpus", "usable CPUs"), ("cpu_count", "CPUs"), ("world_size", "ranks"),
                      ("nodes", "nodes"), ("framework", "framework"),
                      ("framework_version", "framework version"), ("device", "device"), ("gpu_name", "GPU"),
                      ("python", "Python"))


def machine_changes(old: Environment, new: Environment) -> list[str]:
    """What differs between two machines (CPUs, ranks, framework, device, Python), ``label: before → after``."""
    changes = []
    for name, label in ENVIRONMENT_FIELDS:
        if name == "framework_version" and old.framework == new.framework:
            label = new.framework
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            changes.append(f"{label}: {before} → {after}")
    return changes


def environment_changes(old: Report, new: Report) -> tuple[str, ...]:
    """What differs between the runs' machines and settings, one ``label: before → after`` each."""
    changes = machine_changes(old.environment, new.environment)
    for key, label in (("batch_size", "batch size"), ("step_ms", "model step ms")):
        before, after = old.settings.get(key), new.settings.get(key)
        if before != after:
            changes.append(f"{label}: {before} → {after}")
    if old.target != new.target:
        changes.append(f"target: {old.target} → {new.target}")
    return tuple(changes)


def compare(old: Report, new: Report) -> Comparison:
    """Match the runs' trials by config and say what changed."""
    old_trials = {t.config: t for t in old.trials}
    new_trials = {t.config: t for t in new.trials}
    common = tuple(ConfigChange(c, old_trials[c], new_trials[c]) for c in sorted(old_trials) if c in new_trials)
    return Comparison(
        old=old, new=new, common=common,
        only_old=tuple(c for c in sorted(old_trials) if c not in new_trials),
        only_new=tuple(c for c in sorted(new_trials) if c not in old_trials),
        environment_changes=environment_changes(old, new),
    )


@dataclass(frozen=True)
class LoaderChange:
    """One DataLoader (the same creation site) watched in both runs."""

    site: str
    old: LoaderRun
    new: LoaderRun

    @property
    def change(self) -> float | None:
        """Relative change of its steady-state samples/s; None when either has none."""
        if not self.old.samples_per_s or self.new.samples_per_s is None:
            return None
        return self.new.samples_per_s / self.old.samples_per_s - 1


@dataclass(frozen=True)
class RunComparison(_RateChange):
    """Two watched runs (``dataprof run``) side by side: their loaders by site, and the machines."""

    old: RunReport
    new: RunReport
    loaders: tuple[LoaderChange, ...]
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]
    environment_changes: tuple[str, ...]

    @property
    def old_rate(self) -> float | None:
        """The old run's busiest loader's samples/s."""
        return self.old.loaders[0].samples_per_s if self.old.loaders else None

    @property
    def new_rate(self) -> float | None:
        """The new run's busiest loader's samples/s."""
        return self.new.loaders[0].samples_per_s if self.new.loaders else None


def compare_runs(old: RunReport, new: RunReport) -> RunComparison:
    """Match the runs' loaders by creation site and say what changed."""
    old_by, new_by = {r.site: r for r in old.loaders}, {r.site: r for r in new.loaders}
    changes = machine_changes(old.environment, new.environment)
    if old.command != new.command:
        changes.append(f"command: {' '.join(old.command)} → {' '.join(new.command)}")
    return RunComparison(old=old, new=new,
                         loaders=tuple(LoaderChange(site, old_by[site], new_by[site]) for site in old_by
                                       if site in new_by),
                         only_old=tuple(site for site in old_by if site not in new_by),
                         only_new=tuple(site for site in new_by if site not in old_by),
                         environment_changes=tuple(changes))



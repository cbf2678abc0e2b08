"""Two documents of a kind side by side (``dataprof compare``): the configs or loaders both measured, the
headline rate old → new, and how the machines differ. Data only: ``decide.compare`` builds them."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.results.knobs import LoaderConfig
from dataprof.results.run import LoaderRun, RunReport
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
    threshold: float | None = None
    """The largest fall allowed (``--max-regression``, 0.1 = 10%); None: no verdict is asked for."""

    @property
    def old_rate(self) -> float | None:
        """The old run's recommended samples/s (None when nothing completed)."""
        return self.old.recommendation.samples_per_s if self.old.recommendation else None

    @property
    def new_rate(self) -> float | None:
        """The new run's recommended samples/s (None when nothing completed)."""
        return self.new.recommendation.samples_per_s if self.new.recommendation else None


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
    threshold: float | None = None
    """The largest fall allowed (``--max-regression``, 0.1 = 10%); None: no verdict is asked for."""

    @property
    def old_rate(self) -> float | None:
        """The old run's busiest loader's samples/s."""
        return self.old.loaders[0].samples_per_s if self.old.loaders else None

    @property
    def new_rate(self) -> float | None:
        """The new run's busiest loader's samples/s."""
        return self.new.loaders[0].samples_per_s if self.new.loaders else None

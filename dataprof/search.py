"""Search strategies: pure functions from the trials so far to the next config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dataprof.config import LoaderConfig, SearchSpace, grid_configs
from dataprof.model import TrialResult


class Strategy(Protocol):
    name: str

    def propose(self, history: Sequence[TrialResult]) -> LoaderConfig | None:
        """The next config to measure, or None to stop."""


class GridStrategy:
    """Every config of the space, baseline first, in a stable order."""

    name = "grid"

    def __init__(self, space: SearchSpace) -> None:
        self.configs = grid_configs(space)

    def propose(self, history: Sequence[TrialResult]) -> LoaderConfig | None:
        done = {trial.config for trial in history}
        return next((c for c in self.configs if c not in done), None)

    def total(self) -> int:
        return len(self.configs)


STRATEGIES = {"grid": GridStrategy}
"""``--strategy`` choice → implementation (every choice must be mapped)."""

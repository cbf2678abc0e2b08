"""Search strategies: pure functions from the trials so far to the next config and why.

``grid`` measures every config of the space. ``adaptive`` (the default) climbs
``num_workers`` while the gain beats the measurement noise, refines around the
peak, tunes the other knobs only at the best worker count, and never proposes
a config the memory, ``/dev/shm`` or open-file budget forbids. Both end by
measuring what the common rules of thumb would pick, so every report can say
what following them would have cost.
"""

from __future__ import annotations

from collections.abc import Callable

from dataprof.decide.search.adaptive import AdaptiveStrategy
from dataprof.decide.search.common import AUTOTUNE_RULE, RULE_OF_THUMB_NAMES, Budget, Proposal, Strategy, rules_of_thumb
from dataprof.decide.search.grid import GridStrategy
from dataprof.results.knobs import LoaderConfig
from dataprof.results.space import SearchSpace

STRATEGIES: dict[str, Callable[[SearchSpace, Budget, bool, int | None, LoaderConfig | None], Strategy]] = {
    "adaptive": AdaptiveStrategy, "grid": GridStrategy}
"""``--strategy`` choice → implementation (every choice must be mapped)."""

__all__ = ["AUTOTUNE_RULE", "RULE_OF_THUMB_NAMES", "STRATEGIES", "AdaptiveStrategy", "Budget", "GridStrategy",
           "Proposal", "Strategy", "rules_of_thumb"]

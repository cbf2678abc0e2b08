"""A sweep's settings (:class:`SweepSettings`): what it loads, its search space, its budgets; written to and read
from a document's ``settings``. Pure data, standard library only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.codec import AS_TEXT, FLAT, HIDDEN, written_if
from dataprof.results.knobs import DEFAULT_BATCH_SIZE, LoaderConfig
from dataprof.results.space import SearchSpace
from dataprof.results.vocabulary import CacheMode, Framework


@dataclass(frozen=True)
class SweepSettings:
    """Everything a sweep needs besides the target itself."""

    target: str = field(metadata=HIDDEN)
    """Import path ``pkg.mod:attr`` or ``path/file.py:attr`` (in a document: its own ``target``)."""
    framework: str = "auto"
    """``auto`` until the dataset is loaded, then ``torch`` or ``paddle``."""
    world_size: int = 1
    """Under torchrun: each rank loads its shard (DistributedSampler) of the dataset."""
    ranks_per_node: int = 1
    """Local ranks sharing this node's CPUs (the ``auto`` worker range is divided among them)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    step_ms: float = 0.0
    """Model step time the dummy consumer is calibrated to; 0 = loader ceiling."""
    strategy: str = "adaptive"
    rules_of_thumb: bool = True
    """Also measure what the common rules of thumb pick, for the comparison in the report."""
    device: str = "cpu"
    """Resolved device: ``cpu`` (simulated) or ``cuda:N``."""
    trial_seconds: float = 3.0
    """Length of each trial's timed (steady-state) window."""
    trial_timeout_s: float = 60.0
    """A trial that delivers no batch for this long is killed."""
    memory_limit_bytes: int | None = None
    """A trial whose process tree's PSS passes this is killed (status ``oom``)."""
    shuffle: bool = False
    drop_last: bool = False
    collate_fn: str | None = None
    """Import path of a collate function, or None for the default."""
    target_kwargs: dict[str, Any] = field(default_factory=dict, metadata=AS_TEXT)
    """Keyword arguments for a class or factory target (``--arg``; in the JSON: their ``repr``, read back as
    that text)."""
    split: str = "train"
    """A DataModule target: which ``<split>_dataloader()`` is swept."""
    current: LoaderConfig | None = None
    """The user's own settings, measured like the baseline and shown first: a DataLoader target's, or
    ``--current``'s."""
    current_source: str | None = None
    """Where :attr:`current` came from: the loader's class name, or ``--current``."""
    cpus: int | None = None
    """The trials run pinned to this many of the usable CPUs (``--cpus``); None: on all of them."""
    cache: str = "auto"
    """Cold trials (``--cache``): ``auto`` when the trials read data files, ``warm`` never, ``cold`` the
    recommendation made cold, ``both`` every config measured warm measured cold too."""
    space: SearchSpace = field(kw_only=True, metadata=FLAT)
    """The values each knob may take (the JSON holds its fields among the settings')."""
    autotune_steps: int = field(default=50, metadata=written_if(lambda s: s.framework == Framework.PADDLE))
    """Paddle: ``tuning_steps`` for Paddle's own dataloader autotune, run for comparison."""
    cwd: str = field(default_factory=os.getcwd, metadata=HIDDEN)
    """Directory put first on ``sys.path`` when the target is imported."""
    given: tuple[str, ...] = field(default=(), metadata=HIDDEN)
    """Framework-specific knob options given on the command line (checked against the framework found)."""
    require_gpu: bool = field(default=False, metadata=HIDDEN)
    """A usage error unless the resolved device is a GPU."""
    rank: int = field(default=0, metadata=HIDDEN)
    batch_size_given: bool = field(default=True, metadata=HIDDEN)
    """Whether the user gave ``batch_size``; if not, a DataLoader target keeps its own (else 64)."""


CACHE_MODES = tuple(mode.value for mode in CacheMode)
"""``--cache`` values (:attr:`SweepSettings.cache`)."""

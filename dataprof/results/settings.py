"""A sweep's settings (:class:`SweepSettings`): what it loads, its search space, its budgets; written to and read
from a document's ``settings``. Pure data, standard library only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.document import Shown
from dataprof.results.knobs import DEFAULT_BATCH_SIZE, LoaderConfig, SearchSpace
from dataprof.results.vocabulary import CacheMode, Framework


@dataclass(frozen=True)
class SweepSettings:
    """Everything a sweep needs besides the target itself."""

    target: str
    """Import path ``pkg.mod:attr`` or ``path/file.py:attr``."""
    space: SearchSpace
    batch_size: int = DEFAULT_BATCH_SIZE
    target_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for a class or factory target (``--arg``)."""
    collate_fn: str | None = None
    """Import path of a collate function, or None for the default."""
    step_ms: float = 0.0
    """Model step time the dummy consumer is calibrated to; 0 = loader ceiling."""
    device: str = "cpu"
    """Resolved device: ``cpu`` (simulated) or ``cuda:N``."""
    strategy: str = "adaptive"
    trial_seconds: float = 3.0
    """Length of each trial's timed (steady-state) window."""
    trial_timeout_s: float = 60.0
    """A trial that delivers no batch for this long is killed."""
    memory_limit_bytes: int | None = None
    """A trial whose process tree's PSS passes this is killed (status ``oom``)."""
    shuffle: bool = False
    rules_of_thumb: bool = True
    """Also measure what the common rules of thumb pick, for the comparison in the report."""
    drop_last: bool = False
    cwd: str = field(default_factory=os.getcwd)
    """Directory put first on ``sys.path`` when the target is imported."""
    framework: str = "auto"
    """``auto`` until the dataset is loaded, then ``torch`` or ``paddle``."""
    given: tuple[str, ...] = ()
    """Framework-specific knob options given on the command line (checked against the framework found)."""
    autotune_steps: int = 50
    """Paddle: ``tuning_steps`` for Paddle's own dataloader autotune, run for comparison."""
    require_gpu: bool = False
    """A usage error unless the resolved device is a GPU."""
    rank: int = 0
    world_size: int = 1
    """Under torchrun: each rank loads its shard (DistributedSampler) of the dataset."""
    ranks_per_node: int = 1
    """Local ranks sharing this node's CPUs (the ``auto`` worker range is divided among them)."""
    batch_size_given: bool = True
    """Whether the user gave ``batch_size``; if not, a DataLoader target keeps its own (else 64)."""
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON document's ``settings`` (docs/json.md); the space's keys as :meth:`SearchSpace.to_dict`."""
        paddle = {"autotune_steps": self.autotune_steps} if self.framework == Framework.PADDLE else {}
        return {
            "framework": self.framework,
            "world_size": self.world_size,
            "ranks_per_node": self.ranks_per_node,
            "batch_size": self.batch_size,
            "step_ms": self.step_ms,
            "strategy": self.strategy,
            "rules_of_thumb": self.rules_of_thumb,
            "device": self.device,
            "trial_seconds": self.trial_seconds,
            "trial_timeout_s": self.trial_timeout_s,
            "memory_limit_bytes": self.memory_limit_bytes,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "collate_fn": self.collate_fn,
            "target_kwargs": {k: repr(v) for k, v in self.target_kwargs.items()},
            "split": self.split,
            "current": None if self.current is None else self.current.to_dict(),
            "current_source": self.current_source,
            "cpus": self.cpus,
            "cache": self.cache,
            **self.space.to_dict(),
            **paddle,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], target: str = "") -> SweepSettings:
        """Read :meth:`to_dict` back (a saved document's ``settings``, ``target`` its own): a key an older document
        lacks takes its default; each value is kept as written, and ``target_kwargs`` keep their text (the values
        were written as their ``repr``)."""
        current = data.get("current")
        return cls(
            target=target, space=SearchSpace.from_dict(data),
            batch_size=data.get("batch_size", DEFAULT_BATCH_SIZE),
            target_kwargs={key: Shown(text) for key, text in (data.get("target_kwargs") or {}).items()},
            collate_fn=data.get("collate_fn"), step_ms=data.get("step_ms") or 0.0, device=data.get("device") or "cpu",
            strategy=data.get("strategy") or "adaptive", trial_seconds=data.get("trial_seconds", 3.0),
            trial_timeout_s=data.get("trial_timeout_s", 60.0), memory_limit_bytes=data.get("memory_limit_bytes"),
            shuffle=bool(data.get("shuffle")), rules_of_thumb=bool(data.get("rules_of_thumb", True)),
            drop_last=bool(data.get("drop_last")), framework=data.get("framework") or "auto",
            autotune_steps=data.get("autotune_steps", 50), world_size=data.get("world_size") or 1,
            ranks_per_node=data.get("ranks_per_node") or 1, split=data.get("split") or "train",
            current=None if current is None else LoaderConfig.from_dict(current),
            current_source=data.get("current_source"), cpus=data.get("cpus"), cache=data.get("cache") or "auto")


CACHE_MODES = tuple(mode.value for mode in CacheMode)
"""``--cache`` values (:attr:`SweepSettings.cache`)."""

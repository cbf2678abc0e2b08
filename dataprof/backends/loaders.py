"""A DataLoader target: the user's own loader, rebuilt for each trial with the trial's knobs.

What defines the data is kept as the user wrote it: the dataset, the sampler or batch_sampler, the
collate_fn, the worker_init_fn, the generator, drop_last, the batch size, the loader's class and its
other constructor arguments (a subclass's own included). Only the swept knobs change. The recipe is the
constructor call itself, recorded as the loader was built (``backends.construction``); a loader built
before the recording (one handed over by the Python API) is rebuilt from what it keeps on itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataprof.backends.common import batch_size_of, describe_sample, footprint
from dataprof.backends.construction import constructed_with
from dataprof.backends.target import LOADER_CLASSES, describe_exception, loader_framework
from dataprof.errors import TargetError
from dataprof.results.codec import encode
from dataprof.results.environment import UserLoader
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.registry import KNOBS, REGISTRY

KEPT_ATTRIBUTES = {
    "torch": ("dataset", "collate_fn", "worker_init_fn", "generator", "timeout", "pin_memory_device"),
    "paddle": ("dataset", "collate_fn", "worker_init_fn", "timeout", "return_list"),
}
"""What a loader built before the recording is rebuilt from, besides its batching (read off the instance) and its
knobs (each read off it as its record says, :func:`current_config`, and set by :meth:`LoaderTemplate.build`)."""


def _base(cls: type, framework: str) -> type:
    return next(c for c in cls.__mro__ if LOADER_CLASSES.get((c.__module__, c.__name__)) == framework)


def _name(obj: Any) -> str | None:
    if obj is None:
        return None
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def current_config(loader: Any, framework: str) -> LoaderConfig:
    """The knobs the loader was built with, as a LoaderConfig: each of its framework's knobs read off it as its
    record says (those that need workers dropped at 0)."""
    workers = int(getattr(loader, "num_workers", 0) or 0)
    return LoaderConfig.of(workers, framework=framework, **{
        knob.name: knob.read_off(loader) for knob in REGISTRY.arguments(framework, workers)})


@dataclass
class LoaderTemplate:
    """The user's loader as a recipe: its class, its constructor arguments by name, what it was set to."""

    cls: type
    framework: str
    arguments: dict[str, Any]
    """Constructor arguments by parameter name; a ``**kwargs`` parameter holds its dict under its own name."""
    dataset: Any
    batch_size: int | None
    """The loader's batch size; None when batches come from a batch_sampler (or are not collated)."""
    batch_sampler: Any
    """The batch sampler the user gave, or None."""
    current: LoaderConfig
    recorded: bool
    """Whether the arguments are the recorded constructor call (else they were read off the instance)."""
    origin: str | None = None
    """Where the loader came from when not from the target itself: ``MyDataModule.train_dataloader()``."""

    @classmethod
    def of(cls, loader: Any, origin: str | None = None) -> LoaderTemplate:
        """The recipe of ``loader`` (a DataLoader of either framework, or a subclass); ``origin``: the
        DataModule method that returned it."""
        framework = loader_framework(loader)
        if framework is None:
            raise TargetError(f"{type(loader).__name__} is not a DataLoader")
        klass = type(loader)
        recorded = constructed_with(loader)
        arguments = _bound(klass, recorded) if recorded is not None else None
        if framework == "paddle":  # Paddle always keeps a batch sampler: the user's, if the call gave one
            user_sampler = loader.batch_sampler if arguments is None else arguments.get("batch_sampler")
        else:  # torch keeps no batch size when the user gave a batch sampler
            user_sampler = loader.batch_sampler if loader.batch_size is None else None
        return cls(klass, framework, arguments if arguments is not None else _read_off(loader, framework, user_sampler),
                   loader.dataset, None if user_sampler is not None else getattr(loader, "batch_size", None),
                   user_sampler, current_config(loader, framework), arguments is not None, origin)

    @property
    def parameters(self) -> dict[str, inspect.Parameter]:
        """The loader class's constructor parameters."""
        return dict(inspect.signature(self.cls).parameters)

    def build(self, config: LoaderConfig, batch_size: int | None = None, collate_fn: Any = None,
              shard: tuple[int, int] = (0, 1)) -> Any:
        """The user's loader with ``config``'s knobs; ``batch_size`` (``--batch-size``) and ``collate_fn``
        (``--collate-fn``) replace the loader's own when given; ``shard`` (rank, world size) gives a map-style
        dataset without a sampler of its own a DistributedSampler, as Lightning's Trainer does."""
        arguments = {k: dict(v) if isinstance(v, dict) else v for k, v in self.arguments.items()}
        for name in KNOBS[self.framework]:
            self._set(arguments, name, self._knob(config, name), self._knob(self.current, name))
        if batch_size is not None and self.batch_sampler is None:
            self._set(arguments, "batch_size", batch_size)
        if collate_fn is not None:
            self._set(arguments, "collate_fn", collate_fn)
        if shard[1] > 1 and self.framework == "torch":
            self._shard(arguments, shard)
        call = inspect.BoundArguments(inspect.signature(self.cls), arguments)  # type: ignore[arg-type]
        try:
            return self.cls(*call.args, **call.kwargs)
        except Exception as exc:
            raise TargetError(f"rebuilding {self.cls.__name__} with {config.label()} raised "
                              f"{describe_exception(exc)}") from exc

    def _knob(self, config: LoaderConfig, name: str) -> Any:
        value = config.value(name)
        if value is None:  # not passed for this config: the framework's default
            parameter = inspect.signature(_base(self.cls, self.framework)).parameters.get(name)
            value = None if parameter is None else parameter.default
        return value

    def _set(self, arguments: dict[str, Any], name: str, value: Any, now: Any = None) -> None:
        """Pass ``name=value``; a TargetError if the class takes no such argument (unless it is ``now`` already)."""
        if not _place(self.parameters, arguments, name, value) and value != now:
            raise TargetError(f"{self.cls.__name__} takes no {name} argument, so dataprof cannot set it to {value!r}")

    def _shard(self, arguments: dict[str, Any], shard: tuple[int, int]) -> None:
        from torch.utils.data import DistributedSampler, IterableDataset

        if isinstance(self.dataset, IterableDataset) or self.batch_sampler is not None or \
                self._given(arguments, "sampler") is not None:
            return
        shuffle = bool(self._given(arguments, "shuffle"))
        self._set(arguments, "shuffle", None, None)
        rank, world = shard
        self._set(arguments, "sampler", DistributedSampler(self.dataset, num_replicas=world, rank=rank,
                                                           shuffle=shuffle))

    def _given(self, arguments: dict[str, Any], name: str) -> Any:
        keywords = next((p.name for p in self.parameters.values() if p.kind == p.VAR_KEYWORD), None)
        return arguments.get(name, (arguments.get(keywords) or {}).get(name) if keywords else None)

    def check(self, batch_size: int | None, collate_fn: Any, default_collate: Any) -> dict[str, Any]:
        """Load the first batch through the loader at ``num_workers=0``: the sample, the batch and its footprint
        (as :func:`check_batchable` describes a dataset's), or a TargetError."""
        first = baseline(self.framework)
        plain = self.build(first, batch_size, collate_fn)
        collate = getattr(plain, "collate_fn", None) or default_collate
        batched = bool(getattr(plain, "_auto_collation", getattr(plain, "auto_collate_batch", True)))
        seen: list[Any] = []

        def spy(samples: Any) -> Any:
            seen.append(samples)
            return collate(samples)

        try:
            loader = self.build(first, batch_size, spy)
        except TargetError:  # a loader that takes no collate_fn: its batch is described, its sample is not
            loader = plain
        try:
            batch = next(iter(loader))
        except StopIteration:
            raise TargetError(f"{self.cls.__name__} yields no batch: the dataset is empty") from None
        except Exception as exc:
            raise TargetError(f"the first batch of {self.cls.__name__} raised {describe_exception(exc)}") from exc
        sample = seen[0][0] if seen and batched and isinstance(seen[0], (list, tuple)) and seen[0] else \
            (seen[0] if seen else None)
        weight = footprint(batch)
        return {"sample": None if sample is None else describe_sample(sample), "batch_samples": batch_size_of(batch),
                "batch_bytes": weight["bytes"], "batch_tensors": weight["tensors"],
                "batch_objects": weight["objects"]}

    def describe(self) -> dict[str, Any]:
        """What the sweep keeps, for the report's ``dataset.loader`` (docs/json.md)."""
        base = set(inspect.signature(_base(self.cls, self.framework)).parameters)
        extra = sorted(n for n, p in self.parameters.items() if n not in base and n in self.arguments
                       and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        sampler = self._given(self.arguments, "sampler")
        return encode(UserLoader(
            cls=f"{self.cls.__module__}.{self.cls.__qualname__}", batch_size=self.batch_size,
            batch_sampler=_name(type(self.batch_sampler)) if self.batch_sampler is not None else None,
            sampler=None if sampler is None else type(sampler).__name__,
            shuffle=bool(self._given(self.arguments, "shuffle")) or type(sampler).__name__ == "RandomSampler",
            drop_last=bool(self._given(self.arguments, "drop_last")),
            collate_fn=_name(self._given(self.arguments, "collate_fn")),
            worker_init_fn=_name(self._given(self.arguments, "worker_init_fn")), extra_arguments=tuple(extra),
            current=self.current, rebuilt_from="its constructor call" if self.recorded else "its attributes",
            origin=self.origin))


def _bound(cls: type, recorded: tuple[tuple[Any, ...], dict[str, Any]]) -> dict[str, Any] | None:
    """The recorded call's arguments by parameter name; None when they do not fit the signature."""
    args, kwargs = recorded
    try:
        return dict(inspect.signature(cls).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def _place(parameters: Mapping[str, inspect.Parameter], arguments: dict[str, Any], name: str, value: Any) -> bool:
    """Put ``name=value`` where the signature takes it (a named parameter, else ``**kwargs``); False if nowhere."""
    parameter = parameters.get(name)
    if parameter is not None and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        arguments[name] = value
        return True
    keywords = next((p.name for p in parameters.values() if p.kind == p.VAR_KEYWORD), None)
    if keywords is None:
        return False
    arguments.setdefault(keywords, {})[name] = value
    return True


def _read_off(loader: Any, framework: str, user_sampler: Any) -> dict[str, Any]:
    """The constructor arguments of a loader built before the recording, read off the instance (what its
    class does not take, it sets itself)."""
    parameters = inspect.signature(type(loader)).parameters
    base = inspect.signature(_base(type(loader), framework)).parameters
    kept = {n: getattr(loader, n) for n in KEPT_ATTRIBUTES[framework] if n in base and hasattr(loader, n)}
    if user_sampler is not None or framework == "paddle":
        kept["batch_sampler"] = loader.batch_sampler
    else:
        kept.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
        from torch.utils.data import IterableDataset

        if not isinstance(loader.dataset, IterableDataset):
            kept["sampler"] = loader.sampler
    arguments: dict[str, Any] = {}
    for name, value in kept.items():
        _place(parameters, arguments, name, value)
    for name, parameter in parameters.items():
        if name in base or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        for attribute in (name, "_" + name):
            if hasattr(loader, attribute):
                arguments[name] = getattr(loader, attribute)
                break
        else:
            if parameter.default is parameter.empty:
                raise TargetError(f"cannot rebuild this {type(loader).__name__}: its argument {name} is not kept on "
                                  "the instance; give dataprof the function that builds the loader instead")
    return arguments

"""Find a dataset's transform pipeline and time each stage while the dataset runs as usual.

Nothing is re-implemented, and a timed stage stays what it was: an object stage keeps its identity and attributes and is
still an instance of its class (its class is swapped, for the block only, for a subclass whose ``__call__`` times the
original's), so pipelines that dispatch on a stage's type (MONAI's cache, albumentations, torchvision v2) behave exactly
as without dataprof. A plain function stage is replaced, in the list or attribute that holds it, by a timer that calls
it. A stage that can be neither is left alone and said so. :func:`timed_pipeline` puts everything back on exit. A
Compose-like node (an object whose ``.transforms`` is a list or tuple of callables — torchvision, torchvision v2,
paddle.vision, albumentations style — or a plain list of callables) is not timed itself: its cost is its children's. A
Hugging Face ``datasets`` dataset's ``with_transform``/``set_transform`` function is a root too.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ROOT_ATTRIBUTES = ("transform", "transforms", "target_transform")
"""Dataset attributes that hold a pipeline, in the order they are shown."""

MAX_DEPTH = 8


@dataclass
class Stage:
    """One node of the pipeline tree and the time spent in it."""

    name: str
    """Class name of the stage (function name for plain functions)."""
    path: str
    """Where it sits, e.g. ``transform.transforms[2]``."""
    children: list[Stage] = field(default_factory=list)
    composite: bool = False
    """A Compose-like node: its time is the sum of its children's."""
    seconds: float = 0.0
    calls: int = 0
    replay: Callable[[], Any] | None = None
    """The stage's first call again, untimed, with the same arguments (to measure how much of it holds the GIL)."""

    def total_seconds(self) -> float:
        """Seconds spent in this stage: its own, or its children's for a composite."""
        return sum(child.total_seconds() for child in self.children) if self.composite else self.seconds

    def total_calls(self) -> int:
        """Calls of this stage (a composite: its most-called child's)."""
        return max((child.total_calls() for child in self.children), default=0) if self.composite else self.calls

    def leaves(self) -> Iterator[Stage]:
        """The timed stages under this one (itself, if it is timed)."""
        if self.composite:
            for child in self.children:
                yield from child.leaves()
        else:
            yield self

    def reset(self) -> None:
        """Zero the timings (after the warm-up fetch)."""
        self.seconds, self.calls = 0.0, 0
        for child in self.children:
            child.reset()


@dataclass
class Pipeline:
    """The timed stages of one dataset, and what could not be introspected."""

    roots: list[Stage]
    notes: list[str]

    def reset(self) -> None:
        """Zero every stage's timings."""
        for root in self.roots:
            root.reset()


class _Timed:
    """Calls the wrapped stage and adds its wall time to ``stage``; otherwise looks like it."""

    def __init__(self, fn: Callable[..., Any], stage: Stage, clock: Callable[[], float]) -> None:
        self._fn = fn
        self._stage = stage
        self._clock = clock

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _timed_call(self._stage, self._clock, self._fn, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        fn = self.__dict__.get("_fn")
        if fn is None:
            raise AttributeError(name)
        return getattr(fn, name)


def _timed_call(stage: Stage, clock: Callable[[], float], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, its wall time added to ``stage`` (its first call kept as the stage's replay)."""
    if stage.replay is None:
        stage.replay = functools.partial(fn, *args, **kwargs)
    start = clock()
    try:
        return fn(*args, **kwargs)
    finally:
        stage.seconds += clock() - start
        stage.calls += 1


def _timed_class(cls: type, stage: Stage, clock: Callable[[], float]) -> type:
    """A subclass of ``cls`` whose calls add their wall time to ``stage``; named and laid out as ``cls``."""
    original = cls.__call__  # type: ignore[operator]

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _timed_call(stage, clock, original, self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__call__": __call__, "__slots__": (), "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


_FUNCTION_TYPES = ("function", "builtin_function_or_method", "method", "partial", "method-wrapper")


def stage_name(obj: Any) -> str:
    """``RandomErasing``, ``decode`` (function), ``partial(resize)``, ``<lambda>``."""
    func = getattr(obj, "func", None)
    if func is not None and hasattr(obj, "args") and hasattr(obj, "keywords"):
        return f"partial({stage_name(func)})"
    if hasattr(obj, "__name__") and not isinstance(obj, type) and callable(obj) and \
            type(obj).__name__ in ("function", "builtin_function_or_method", "method"):
        return str(obj.__name__)
    return type(obj).__name__


def children_of(obj: Any) -> list[Any] | tuple[Any, ...] | None:
    """The stage list of a Compose-like object or a plain list of callables; None for a leaf."""
    if isinstance(obj, (list, tuple)):
        return obj if obj and all(callable(item) for item in obj) else None
    inner = getattr(obj, "transforms", None) if not isinstance(obj, type) else None
    if isinstance(inner, (list, tuple)) and inner and all(callable(item) for item in inner):
        return inner
    return None


class _Restorer:
    """Undo list: every replacement made while wrapping, put back in reverse."""

    def __init__(self) -> None:
        self.undo: list[Callable[[], None]] = []

    def swap_class(self, obj: Any, cls: type) -> bool:
        """Make ``obj`` an instance of ``cls`` (a subclass of its own class) until restored."""
        original = type(obj)
        try:
            obj.__class__ = cls
        except TypeError:  # a built-in or extension type, or one whose layout a subclass cannot share
            return False
        self.undo.append(lambda: setattr(obj, "__class__", original))
        return True

    def set_item(self, container: Any, index: Any, value: Any) -> None:
        """Replace ``container[key]``, to be put back by :meth:`restore`."""
        original = container[index]
        container[index] = value
        self.undo.append(lambda: container.__setitem__(index, original))

    def set_attr(self, owner: Any, name: str, value: Any) -> bool:
        """Replace ``obj.name``, to be put back by :meth:`restore`."""
        original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        try:
            setattr(owner, name, value)
        except (AttributeError, TypeError):
            return False
        self.undo.append(lambda: _delattr_quietly(owner, name) if original is _MISSING
                         else setattr(owner, name, original))
        return True

    def restore(self) -> None:
        """Put back everything replaced, last first."""
        while self.undo:
            self.undo.pop()()


_MISSING = object()


def _delattr_quietly(owner: Any, name: str) -> None:
    with contextlib.suppress(AttributeError):
        delattr(owner, name)


def _wrap(obj: Any, path: str, install: Callable[[Any], bool], seen: set[int], restorer: _Restorer,
          clock: Callable[[], float], notes: list[str], depth: int = 0) -> Stage:
    """Build the Stage for ``obj`` and put timers on its leaves.

    ``install(new)`` puts ``new`` where ``obj`` is held (a timer for a leaf, a
    tuple of timed stages for a tuple) and says whether it could.
    """
    stage = Stage(name=stage_name(obj), path=path)
    seen.add(id(obj))
    items = children_of(obj) if depth < MAX_DEPTH else None
    if items is None:
        if type(obj).__name__ in _FUNCTION_TYPES or isinstance(obj, type):
            timed = install(_Timed(obj, stage, clock))
        else:
            try:
                timed = restorer.swap_class(obj, _timed_class(type(obj), stage, clock))
            except TypeError:  # a type that cannot be subclassed
                timed = False
        if not timed:
            notes.append(f"{path} ({stage.name}) cannot be timed without replacing it by an object of another "
                         "type, so it is not timed on its own: the sample's time includes it")
        return stage
    stage.composite = True
    prefix = path if isinstance(obj, (list, tuple)) else f"{path}.transforms"
    wrapped: list[Any] = list(items)
    for index, item in enumerate(items):
        def put(new: Any, index: int = index) -> bool:
            wrapped[index] = new
            return True
        stage.children.append(_wrap(item, f"{prefix}[{index}]", put, seen, restorer, clock, notes, depth + 1))
    if isinstance(items, list):
        for index, item in enumerate(wrapped):
            if item is not items[index]:
                restorer.set_item(items, index, item)
        return stage
    installed = install(tuple(wrapped)) if isinstance(obj, tuple) else \
        restorer.set_attr(obj, "transforms", tuple(wrapped))
    if not installed:
        notes.append(f"{path} ({stage.name}) holds its stages in a tuple that cannot be replaced, "
                     "so they are not timed")
        stage.children = []
    return stage


def _holders(dataset: Any) -> list[tuple[str, Any]]:
    """The dataset, then the datasets it wraps (``.dataset`` of Subset-like wrappers), with their paths."""
    holders, obj, path = [], dataset, ""
    for _ in range(4):
        holders.append((path, obj))
        inner = getattr(obj, "dataset", None) if not isinstance(obj, type) else None
        if inner is None or inner is obj:
            break
        obj, path = inner, f"{path}dataset."
    return holders


@contextmanager
def timed_pipeline(dataset: Any, clock: Callable[[], float] = time.perf_counter) -> Iterator[Pipeline]:
    """Time every stage of the dataset's pipeline while the block runs; restore it after."""
    restorer = _Restorer()
    roots: list[Stage] = []
    notes: list[str] = []
    seen: set[int] = set()
    try:
        for prefix, holder in _holders(dataset):
            for attr in ROOT_ATTRIBUTES:
                try:
                    obj = getattr(holder, attr, None)
                except Exception:
                    continue
                if obj is None or id(obj) in seen or not (callable(obj) or children_of(obj) is not None) \
                        or _covers_known(obj, seen):
                    continue
                roots.append(_wrap(obj, prefix + attr, functools.partial(restorer.set_attr, holder, attr),
                                   seen, restorer, clock, notes))
            formatter = _format_transform(holder)
            if formatter is not None and id(formatter[1]) not in seen:
                kwargs, fn = formatter

                def put(new: Any, kwargs: dict[str, Any] = kwargs) -> bool:
                    restorer.set_item(kwargs, "transform", new)
                    return True

                roots.append(_wrap(fn, prefix + "with_transform", put, seen, restorer, clock, notes))
            if roots:
                break
        yield Pipeline(roots=roots, notes=notes)
    finally:
        restorer.restore()


def _format_transform(holder: Any) -> tuple[dict[str, Any], Any] | None:
    """A Hugging Face ``datasets`` dataset's ``with_transform`` function, and the dict that holds it."""
    kwargs = getattr(holder, "_format_kwargs", None) if not isinstance(holder, type) else None
    if isinstance(kwargs, dict) and callable(kwargs.get("transform")):
        return kwargs, kwargs["transform"]
    return None


def _covers_known(obj: Any, seen: set[int]) -> bool:
    """A torchvision ``StandardTransform``-like holder of stages already timed (its own time would repeat theirs)."""
    parts = [getattr(obj, name, None) for name in ("transform", "target_transform")]
    present = [part for part in parts if part is not None]
    return bool(present) and all(id(part) in seen for part in present)

"""Patching a framework's DataLoader as soon as the module defining it is imported, and remembering the
arguments every DataLoader (subclasses included) was constructed with.

A sweep of a DataLoader target rebuilds the user's loader with other knobs: the exact arguments it was
called with (a subclass's own included) are the only faithful recipe, and no DataLoader keeps them. So
before the target is imported, ``DataLoader.__new__`` learns to keep them on the instance; it sees the
arguments of the outermost constructor call, whatever subclass is built.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

LOADER_MODULES = {"torch.utils.data.dataloader": "torch", "paddle.io.reader": "paddle",
                  "torchdata.nodes.loader": "torch"}
"""The modules defining each framework's loader, patched as soon as they are imported."""
LOADER_CLASSES = {"torchdata.nodes.loader": "Loader"}
"""A loader module's loader class, where it is not ``DataLoader``: torchdata's ``Loader`` over a node pipeline."""


def loader_class(module: ModuleType) -> Any:
    """The loader class ``module`` (one of :data:`LOADER_MODULES`) defines."""
    return getattr(module, LOADER_CLASSES.get(getattr(module, "__name__", ""), "DataLoader"))

CONSTRUCTED = "_dataprof_constructed"
"""Instance attribute holding ``(args, kwargs)`` of the constructor call."""


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after a module of :data:`LOADER_MODULES` is imported."""

    def __init__(self, patch: Callable[[ModuleType], object], names: Collection[str] = tuple(LOADER_MODULES)) -> None:
        self.patch = patch
        self.names = frozenset(names)
        """The modules patched as they are imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        """The module's own spec, its loader wrapped to patch after executing it."""
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        inner_exec, patch = spec.loader.exec_module, self.patch

        def exec_module(module: ModuleType) -> None:
            inner_exec(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def patch_loader_modules(patch: Callable[[ModuleType], object],
                         names: Collection[str] = tuple(LOADER_MODULES)) -> None:
    """``patch`` each DataLoader module (or each of ``names``) imported already, and each one when it is
    imported."""
    for name in names:
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, PatchOnImport(patch, names))


class _KeepArguments:
    """A ``__new__`` that keeps the constructor call's arguments on the instance.

    To ``inspect.signature`` it reads as the class's ``__init__``: a class's own ``__new__`` would
    otherwise be taken as its signature, and every DataLoader would seem to take ``(*args, **kwargs)``.
    """

    def __get__(self, instance: Any, owner: type) -> Callable[..., Any]:
        def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
            made: Any = object.__new__(klass)
            object.__setattr__(made, CONSTRUCTED, (args, kwargs))
            return made

        __new__.__signature__ = inspect.signature(getattr(owner, "__init__"))  # type: ignore[attr-defined]  # noqa: B009
        return __new__


def remember_arguments(module: ModuleType) -> None:
    """Make ``module.DataLoader`` (and every subclass without a ``__new__`` of its own) keep its
    constructor arguments on the instance (:func:`constructed_with`)."""
    if getattr(module, "__name__", "") in LOADER_CLASSES:
        return  # a DataLoader target is rebuilt from its arguments; another loader class is not a target
    cls = module.DataLoader
    if "__new__" not in cls.__dict__:
        cls.__new__ = _KeepArguments()  # type: ignore[assignment]


def record_constructions() -> None:
    """From now on, every DataLoader constructed in this process keeps its arguments."""
    patch_loader_modules(remember_arguments)


def constructed_with(loader: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``(args, kwargs)`` the loader was constructed with, or None when it was built before the recording."""
    recorded = loader.__dict__.get(CONSTRUCTED)
    return None if recorded is None else (tuple(recorded[0]), dict(recorded[1]))

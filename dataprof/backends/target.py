"""Resolve ``pkg.mod:attr`` or ``path/file.py:attr`` into a Dataset or a DataLoader (a DataModule's included).

Every failure is a :class:`TargetError` whose message names what was wrong
(module, attribute, the user's exception and its file:line) and what to do.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataprof.backends.frameworks import in_package
from dataprof.errors import TargetError, UsageError
from dataprof.results.request import SPLITS, split_target


def parse_kwarg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE a Python literal (``3``, ``[1,2]``, ``None``) or else a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise UsageError(f"--arg {text!r}: expected KEY=VALUE with KEY a Python identifier")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return key, value


def user_frame(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame outside dataprof and torch, if any."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if in_package(frame.filename, "dataprof"):
            continue
        if "/torch/" in path or "/importlib/" in path or path.startswith("<frozen"):
            continue
        return f"{frame.filename}:{frame.lineno}"
    return None


def describe_exception(exc: BaseException) -> str:
    """``ValueError: bad thing (at data.py:12)``."""
    where = user_frame(exc)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = type(exc).__name__ + (f": {message}" if message else "")
    return text + (f" (at {where})" if where else "")


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise TargetError(f"target file not found: {path}")
    name = path.stem
    parent = str(path.resolve().parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise TargetError(f"importing {path} raised {describe_exception(exc)}") from exc
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise TargetError(
                f"module {name!r} not found (is it installed, or are you in the directory that holds it?)"
            ) from exc
        raise TargetError(f"importing {name} raised {describe_exception(exc)}") from exc
    except Exception as exc:
        raise TargetError(f"importing {name} raised {describe_exception(exc)}") from exc


def load_object(text: str, cwd: str | None = None) -> Any:
    """Import the module or file and return the named attribute (dots allowed)."""
    where, attr = split_target(text)
    if cwd is not None and cwd not in sys.path:
        sys.path.insert(0, cwd)
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if cwd is not None and not path.is_absolute():
            path = Path(cwd) / path
        module = _import_file(path)
    else:
        module = _import_module(where)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if not n.startswith("_"))
            hint = f"; it defines: {', '.join(names[:12])}" if names else ""
            raise TargetError(f"{where} has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    return obj


def is_dataset(obj: Any) -> bool:
    """Map-style (``__getitem__`` + ``__len__``) or iterable (``__iter__``) instance."""
    if isinstance(obj, type) or callable(obj) and inspect.isroutine(obj):
        return False
    cls = type(obj)
    return (hasattr(cls, "__getitem__") and hasattr(cls, "__len__")) or hasattr(cls, "__iter__")


LOADER_CLASSES = {("torch.utils.data.dataloader", "DataLoader"): "torch", ("paddle.io.reader", "DataLoader"): "paddle"}
"""Each framework's DataLoader, by module and name (a target is checked against them without importing either)."""


def loader_framework(obj: Any) -> str | None:
    """``torch`` or ``paddle`` when ``obj`` is an instance of that framework's DataLoader or a subclass."""
    if isinstance(obj, type):
        return None
    for cls in type(obj).__mro__:
        framework = LOADER_CLASSES.get((cls.__module__, cls.__name__))
        if framework is not None:
            return framework
    return None


def is_datamodule(obj: Any) -> bool:
    """A LightningDataModule instance, or anything with its protocol (``setup`` and ``train_dataloader``)."""
    return not isinstance(obj, type) and callable(getattr(obj, "setup", None)) and \
        callable(getattr(obj, "train_dataloader", None))


def datamodule_loader(module: Any, split: str, name: str) -> Any:
    """``prepare_data()``, ``setup(stage)``, then ``<split>_dataloader()``, as Lightning's Trainer calls them."""
    stage = SPLITS[split]
    steps: list[tuple[str, Any]] = [("prepare_data()", getattr(module, "prepare_data", None)),
                                    (f"setup({stage!r})", lambda: module.setup(stage)),
                                    (f"{split}_dataloader()", getattr(module, f"{split}_dataloader", None))]
    result: Any = None
    for text, step in steps:
        if step is None:
            if text.endswith("_dataloader()"):
                raise TargetError(f"{name} is a {type(module).__name__} without {text}: choose --split "
                                  f"({', '.join(SPLITS)})")
            continue
        try:
            result = step()
        except Exception as exc:
            raise TargetError(f"{type(module).__name__}.{text} raised {describe_exception(exc)}") from exc
    if loader_framework(result) is None:
        raise TargetError(f"{type(module).__name__}.{split}_dataloader() returned a {type(result).__name__}, not a "
                          "DataLoader: dataprof sweeps one loader (point it at a function that returns that one)")
    return result


def build_target(obj: Any, kwargs: dict[str, Any], name: str) -> Any:
    """The object the target names: an instance as is (a Dataset, a DataLoader, a DataModule), a class or
    factory called with ``kwargs``."""
    if not isinstance(obj, type) and (is_dataset(obj) or is_datamodule(obj)):
        if kwargs:
            raise TargetError(f"{name} is a ready {type(obj).__name__} instance; it takes no --arg")
        return obj
    if not callable(obj):
        raise TargetError(
            f"{name} is a {type(obj).__name__}, not a Dataset, a DataLoader, a LightningDataModule, "
            "a class or a factory")
    return _call(obj, kwargs, name)


def build_dataset(obj: Any, kwargs: dict[str, Any], name: str, split: str = "train") -> Any:
    """The target's dataset or DataLoader (:func:`build_target`); a LightningDataModule's
    ``<split>_dataloader()`` (:func:`datamodule_loader`)."""
    made = build_target(obj, kwargs, name)
    if is_datamodule(made):
        made = datamodule_loader(made, split, name)
    return checked(made, name)


def checked(made: Any, name: str) -> Any:
    """``made`` if it is a Dataset or a DataLoader, else a TargetError saying what it is, or what it iterates: a
    loader that is no DataLoader, taken for an iterable dataset, would have its batches batched again."""
    batching = _makes_batches(made)
    if batching is not None:
        raise TargetError(f"{name} returned a {type(made).__name__}, {batching}")
    if loader_framework(made) is None and not is_dataset(made):
        raise TargetError(
            f"{name} returned a {type(made).__name__}, which is neither a Dataset (it needs __getitem__ and __len__, "
            "or __iter__), a DataLoader nor a LightningDataModule")
    return made


SELF_BATCHING = ("torchdata.nodes",)
"""Packages whose pipelines make their batches themselves, outside a DataLoader (a ``torchdata.nodes`` ``Loader``
or node: its mapper's threads or processes)."""


def _makes_batches(made: Any) -> str | None:
    """What ``made`` iterates, where it is not a DataLoader and yields batches all the same, with where to point
    dataprof instead: a pipeline of :data:`SELF_BATCHING`'s (its own workers would also run in each trial's), or a
    wrapper that iterates DataLoaders it holds in its attributes (timm's ``PrefetchLoader``, Lightning's
    ``CombinedLoader``: directly, or in a list, tuple or dict there). None for a DataLoader, for what does not
    iterate, and for what declares itself a dataset (map-style, or a subclass of a class named ``Dataset`` or
    ``IterableDataset``: a dataset may stream from a loader of its own)."""
    package = next((p for p in SELF_BATCHING for cls in type(made).__mro__
                    if cls.__module__ == p or cls.__module__.startswith(f"{p}.")), None)
    if package is not None:
        return (f"a {package} pipeline that makes its batches itself, with workers of its own: point dataprof at "
                f"the map-style dataset it maps (a sweep's --worker-kind process,thread measures {package} threads "
                "beside processes), or at the training that iterates it (dataprof run; dataprof tune sets the "
                "pipeline's workers)")
    declared = hasattr(type(made), "__getitem__") or \
        any(cls.__name__ in ("Dataset", "IterableDataset") for cls in type(made).__mro__)
    if loader_framework(made) is not None or not hasattr(type(made), "__iter__") or declared:
        return None
    held: dict[int, tuple[str, Any]] = {}
    for attribute, value in (vars(made) if hasattr(made, "__dict__") else {}).items():
        values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        for item in values:
            if loader_framework(item) is not None:
                held.setdefault(id(item), (attribute, item))
    if not held:
        return None
    where = ", ".join(dict.fromkeys(f".{attribute}" for attribute, _ in held.values()))
    kind = type(next(iter(held.values()))[1]).__name__
    if len(held) == 1:
        return (f"which iterates the {kind} it holds ({where}): its items are that loader's batches; point dataprof "
                f"at the {kind} itself (a function that returns it)")
    return (f"which iterates the {len(held)} loaders it holds ({where}): its items are their batches; point "
            f"dataprof at one {kind} itself (a function that returns it)")


def _call(obj: Any, kwargs: dict[str, Any], name: str) -> Any:
    """``obj(**kwargs)``: arguments that do not fit, or the user's exception, as a TargetError."""
    try:
        inspect.signature(obj).bind(**kwargs)
    except TypeError as exc:
        raise TargetError(f"{name} does not accept these --arg values: {exc}") from exc
    except ValueError:
        pass  # builtins without a signature: let the call decide
    try:
        return obj(**kwargs)
    except Exception as exc:
        raise TargetError(f"{name}(...) raised {describe_exception(exc)}") from exc


def load_collate(text: str | None, cwd: str | None) -> Callable[[list[Any]], Any] | None:
    """Resolve ``--collate-fn MOD:ATTR``; None means the DataLoader default."""
    if text is None:
        return None
    fn = load_object(text, cwd)
    if not callable(fn):
        raise TargetError(f"--collate-fn {text}: {type(fn).__name__} is not callable")
    return fn  # type: ignore[no-any-return]

"""Which importable function built a DataLoader, and with what arguments: what ``dataprof run`` offers as the
TARGET of the sweep that comes next (``dataprof sweep train.py:make_loader --arg n=1000``).

Read from the frame that called the DataLoader's constructor, in the watched script's own process. A
function counts as a factory only if it is importable without running the training (a module-level
function of a module, or of a script whose training is under ``if __name__ == "__main__":``) and it had
returned by the time its loader was first iterated.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from dataprof.backends.target import is_datamodule
from dataprof.measure.watch.events import Factory
from dataprof.measure.watch.sites import relative
from dataprof.results.request import SPLITS


def _literal(value: Any) -> bool:
    """Whether ``--arg k=<repr>`` gives the value back (a Python literal)."""
    try:
        return bool(ast.literal_eval(repr(value)) == value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


MAIN_GUARD = re.compile(r"^if\s+__name__\s*==", re.MULTILINE)
"""A top-level ``if __name__ == ...:`` line."""


def _guarded(path: str) -> bool:
    """Whether the script runs its training only under ``if __name__ == "__main__":`` (so importing it is safe).

    Read as text, not parsed: this runs in the training's process before its workers fork, and parsing a script
    there leaves its heap strewn with freed syntax nodes, whose pages every forked worker then copies as it
    allocates (a training whose workers start each epoch ran 30% slower; ``benchmarks/run_overhead.py``)."""
    try:
        return MAIN_GUARD.search(Path(path).read_text(encoding="utf-8")) is not None
    except (OSError, ValueError):
        return False


def _where(frame: FrameType) -> str | None:
    """The module part of a TARGET for code in ``frame``'s module: its file (under the current directory, or
    the script itself when guarded), else its import name; None when importing it would run the training."""
    module = frame.f_globals.get("__name__")
    path = frame.f_globals.get("__file__")
    if module == "__main__":
        return relative(path) if path and _guarded(path) else None
    if path and not relative(path).startswith(".."):
        return relative(path)
    return module if isinstance(module, str) else None


def loader_factory(frame: FrameType | None) -> Factory:
    """The function that built a loader in ``frame``: ``factory`` (``file.py:make_loader``, a DataModule's
    ``file.py:MyDataModule``), its ``factory_args`` (``KEY=VALUE`` items) and ``factory_blocked`` (why ``--arg``
    cannot give them); all None when the loader was not built by an importable function."""
    none = Factory()
    if frame is None:
        return none
    code = frame.f_code
    where = _where(frame)
    owner = frame.f_locals.get("self")
    if where is not None and owner is not None and is_datamodule(owner) and code.co_name.endswith("_dataloader"):
        split = code.co_name[:-len("_dataloader")]
        cls = type(owner)
        if split in SPLITS and frame.f_globals.get(cls.__name__) is cls:
            required = _required(cls)
            return Factory(f"{where}:{cls.__name__}", (), f"{cls.__name__} needs {', '.join(required)}, which "
                           "the script passed as dataprof cannot see" if required else None, split)
    function = frame.f_globals.get(code.co_name)
    if where is None or getattr(function, "__code__", None) is not code:
        return none
    defaults = _defaults(function)
    args, blocked = [], None
    for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
        value = frame.f_locals.get(name)
        if name in defaults and _same(defaults[name], value):
            continue
        if not _literal(value):
            blocked = f"its argument {name} is a {type(value).__name__}, which --arg cannot give"
            break
        args.append(f"{name}={value!r}")
    return Factory(f"{where}:{code.co_name}", tuple(args), blocked)


def still_running(frame: FrameType) -> bool:
    """Whether ``frame`` is on the caller's stack: the function that built a loader is iterating it itself
    (a training function, not a factory: sweeping it would train)."""
    current: FrameType | None = sys._getframe(1)
    while current is not None:
        if current is frame:
            return True
        current = current.f_back
    return False


def _same(default: Any, value: Any) -> bool:
    try:
        return default is value or (type(default) is type(value) and bool(default == value))
    except Exception:
        return False


def _parameters(function: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return {}


def _defaults(function: Any) -> dict[str, Any]:
    """The function's parameters that have defaults, and the defaults."""
    return {n: p.default for n, p in _parameters(function).items() if p.default is not p.empty}


def _required(cls: type) -> list[str]:
    """The constructor's parameters without a default."""
    return [n for n, p in _parameters(cls).items()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

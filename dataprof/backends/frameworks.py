"""Whether a framework is installed, and importing it quietly: imported by every module that needs paddle."""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import Any


def paddle_available() -> bool:
    """Whether paddlepaddle is installed (found without importing it)."""
    return importlib.util.find_spec("paddle") is not None


def likely_framework(requested: str) -> str | None:
    """The framework a target will use, before anything is built: the one given, else (``auto``) torch when it is
    installed (``detect_framework``'s default), else paddle when it is; None when neither is."""
    if requested != "auto":
        return requested
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    return "paddle" if paddle_available() else None


def import_paddle() -> Any:
    """``import paddle``, without the warnings its import prints (e.g. about ccache)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle
    return paddle


@functools.cache
def package_dir(name: str) -> tuple[str, ...]:
    """Where the installed package ``name`` lives, each directory ending in a separator, found without importing
    it; empty when it is not installed. A frame is the package's by where it is, never by a directory's name (a
    user's checkout under ``~/dataprof/`` is the user's)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ()
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return tuple(sorted({os.path.join(os.path.realpath(p), "") for p in locations} |
                        {os.path.join(os.path.abspath(p), "") for p in locations}))


def in_package(path: str, *names: str) -> bool:
    """Whether the file at ``path`` belongs to one of the installed packages ``names`` (:func:`package_dir`)."""
    dirs = tuple(d for name in names for d in package_dir(name))
    return bool(dirs) and (path.startswith(dirs) or os.path.realpath(path).startswith(dirs))

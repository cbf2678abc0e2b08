"""Whether a framework is installed, and importing it quietly: imported by every module that needs paddle."""

from __future__ import annotations

import importlib.util
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

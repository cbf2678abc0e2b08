"""Whether a framework is installed, and importing it quietly: imported by every module that needs paddle."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any


def paddle_available() -> bool:
    """Whether paddlepaddle is installed (found without importing it)."""
    return importlib.util.find_spec("paddle") is not None


def import_paddle() -> Any:
    """``import paddle``, without the warnings its import prints (e.g. about ccache)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle
    return paddle

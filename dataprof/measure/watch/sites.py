"""Where the user built a loader: the frame of the user's own code that led to its construction, as
``file:line`` relative to the directory the user ran from."""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from dataprof.backends.frameworks import in_package

HOME_ENV = "DATAPROF_HOME"
"""The directory the user ran dataprof from, when a run's script runs elsewhere (``tune --workdir``)."""


def relative(path: str) -> str:
    """``path`` relative to the directory the user ran from."""
    return os.path.relpath(path, os.environ.get(HOME_ENV) or os.getcwd())


_NOT_THE_USERS = ("/torch/", "/paddle/", "<frozen")
"""Paths of the frames between the user's call and a DataLoader's construction (dataprof's own, where it is
installed)."""


def user_frame(loader: Any) -> FrameType | None:
    """The first frame outside torch, paddle, dataprof and the loader's own constructors (a subclass's):
    where the user created the loader."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not any(part in path for part in _NOT_THE_USERS) and not in_package(path, "dataprof") \
                and frame.f_locals.get("self") is not loader:
            return frame
        frame = frame.f_back  # type: ignore[assignment]
    return None


def site_of(frame: FrameType | None) -> str:
    """``file:line`` of ``frame``, ``?`` when there is none."""
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    return f"{relative(path) if not path.startswith('<') else path}:{frame.f_lineno}"

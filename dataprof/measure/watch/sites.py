"""Where the user built a loader: the frame of the user's own code that led to its construction (past the
frames of the libraries that build loaders for it: Lightning's hooks and wrappers, accelerate's ``prepare``, HF
Trainer's ``get_train_dataloader``, timm's ``create_loader``, mmengine's ``build_dataloader``), as ``file:line``
relative to the directory the user ran from; which split the loader serves, where the stack says; and the
library functions that built it."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import sysconfig
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from dataprof.backends.frameworks import in_package
from dataprof.measure.cache.files import installed_file
from dataprof.measure.watch.events import Factory
from dataprof.results.knobs import KnobValues, LoaderConfig

HOME_ENV = "DATAPROF_HOME"
"""The directory the user ran dataprof from, when a run's script runs elsewhere (``tune --workdir``)."""

_NOT_THE_USERS = ("torch", "paddle", "dataprof")
"""The installed packages whose frames lie between the user's call and a DataLoader's construction."""
_LIBRARY_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_STDLIB = os.path.join(sysconfig.get_paths().get("stdlib") or "<none>", "")
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
               "eval": "val", "evaluation": "val", "test": "test", "predict": "predict"}
"""Words of a function's name (``get_train_dataloader``, ``val_dataloader``) that say which split it builds."""
SPLIT_FLAGS = ("is_training", "is_train", "training")
"""A library function's boolean arguments that say it builds the training split (timm's ``create_loader``)."""
BUILDERS_KEPT = 6
"""Library functions named per loader, innermost first."""


def relative(path: str) -> str:
    """``path`` relative to the directory the user ran from."""
    return os.path.relpath(path, os.environ.get(HOME_ENV) or os.getcwd())


@dataclass(frozen=True)
class Origin:
    """Where a loader came from."""

    frame: FrameType | None
    """The user's frame that led to it (None: no frame of the user's on the stack)."""
    site: str
    """That frame's ``file:line``, or the site of the loader it was built from."""
    split: str | None = None
    """``train``, ``val``, ``test`` or ``predict`` where a function on the stack says (None: unknown)."""
    built_by: tuple[str, ...] = ()
    """The library functions between the user's frame and the constructor (``module:qualname``), innermost
    first."""


TAG = "_dataprof"
"""The key of a loader's ``__dict__`` under which the watch keeps its :class:`Tag` (out of the way of the loader's
own attributes and of ``DataLoader.__setattr__``'s checks)."""


@dataclass(frozen=True)
class Tag:
    """What the watch keeps on a loader it saw built (frozen: a copy of the loader keeps its own)."""

    origin: Origin
    factory: Factory = field(default_factory=Factory)
    """The function that built it, as a sweep target (:func:`~dataprof.measure.watch.factory.loader_factory`)."""
    threads: LoaderConfig | None = None
    """``worker_kind=thread`` set where its constructor takes no ``worker_method``: the config the thread pipeline
    standing in for its workers loads with."""
    asked: KnobValues = field(default_factory=KnobValues)
    """The knobs the watch set where it was built (``--override``)."""
    number: int | None = None
    """Its number in the run, from its first iteration."""
    pipeline: Any = None
    """The thread pipeline standing in for its workers, built at its first epoch and kept for the others."""
    own: bool = False
    """Built by dataprof (that thread pipeline): not watched itself, its batches are the loader's it serves."""


def tag_of(loader: Any) -> Tag | None:
    """The watch's :class:`Tag` on ``loader``; None on a loader it did not see built."""
    tag = getattr(loader, "__dict__", {}).get(TAG)
    return tag if isinstance(tag, Tag) else None


def retag(loader: Any, **changes: Any) -> Tag:
    """``loader``'s tag with ``changes``, kept on it."""
    tag = tag_of(loader)
    assert tag is not None
    loader.__dict__[TAG] = tag = dataclasses.replace(tag, **changes)
    return tag


def _ours(path: str) -> bool:
    """Frames of the interpreter's frozen modules, or of the installed torch, paddle or dataprof (by where they are
    installed: a user's own folder named ``torch/`` is the user's): never the user's, never a builder."""
    return path.startswith("<frozen") or in_package(path, *_NOT_THE_USERS)


def library(path: str) -> bool:
    """Whether ``path`` is an installed library's (site-packages, or a packages directory on ``sys.path``: pip's
    ``--target``, a cluster's ``PYTHONPATH``) or the standard library's: not the user's."""
    return any(part in path for part in _LIBRARY_DIRS) or path.startswith(_STDLIB) or installed_file(path)


def _split_of(frame: FrameType, users: bool) -> str | None:
    """The split a function builds, by a word of its name (a user's function only when named for a loader, as a
    Lightning hook is: ``val_dataloader``) or a library function's boolean ``is_training``."""
    name = frame.f_code.co_name.lower()
    if not users or name.endswith("loader"):
        for word in re.split(r"[^a-z]+", name):
            if word in SPLIT_WORDS:
                return SPLIT_WORDS[word]
    if not users:
        for flag in SPLIT_FLAGS:
            value = frame.f_locals.get(flag)
            if isinstance(value, bool):
                return "train" if value else "val"
    return None


def _constructing(frame: FrameType, loader: Any) -> bool:
    """Whether ``frame`` is part of ``loader``'s construction (a subclass's ``__init__``, a library's wrapper of
    it such as Lightning's): the loader is among its locals. A function that builds a loader holds none yet."""
    return any(value is loader for value in frame.f_locals.values())


def _name(frame: FrameType) -> str:
    code = frame.f_code
    return f"{frame.f_globals.get('__name__', '?')}:{getattr(code, 'co_qualname', code.co_name)}"


def _source(frame: FrameType, loader: Any) -> Tag | None:
    """The tag of a loader among a library frame's locals that this one is built from (accelerate's ``prepare``, a
    re-instantiation with a distributed sampler): another instance of its class, already sited."""
    return next((tag for value in frame.f_locals.values() if value is not loader
                 for tag in (tag_of(value),) if tag is not None), None)


def origin(loader: Any) -> Origin:
    """Where ``loader``, under construction, comes from: the first frame outside torch, paddle, dataprof, the
    loader's own construction (its constructors, their wrappers) and the installed libraries (else the first
    outside the first four); the split the functions on the way say; the library functions on the way. A loader
    built by a library from another loader already sited takes that one's site, split and builders, unless the
    functions on the way named another split (HF Trainer's eval loader, built while its training loop holds the
    train loader, is the eval split's)."""
    frame: FrameType | None = sys._getframe(1)
    first: FrameType | None = None
    split: str | None = None
    built_by: list[str] = []
    while frame is not None:
        path = frame.f_code.co_filename
        if not _ours(path) and not _constructing(frame, loader):
            if not library(path):
                return Origin(frame, site_of(frame), split or _split_of(frame, True), tuple(built_by))
            source = _source(frame, loader)
            if source is not None and split in (None, source.origin.split):
                return source.origin
            first = first or frame
            split = split or _split_of(frame, False)
            if len(built_by) < BUILDERS_KEPT:
                built_by.append(_name(frame))
        frame = frame.f_back
    return Origin(first, site_of(first), split, tuple(built_by))


def user_frame(loader: Any) -> FrameType | None:
    """The user's frame that led to ``loader`` (see :func:`origin`)."""
    return origin(loader).frame


def site_of(frame: FrameType | None) -> str:
    """``file:line`` of ``frame``, ``?`` when there is none."""
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    return f"{relative(path) if not path.startswith('<') else path}:{frame.f_lineno}"

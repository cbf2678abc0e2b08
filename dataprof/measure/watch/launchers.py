"""A watched script that starts ranks of its own (``torch.multiprocessing.spawn``, as PyTorch's ImageNet example
does with ``--multiprocessing-distributed``; Lightning's ``ddp_spawn`` and its subprocess launcher, which runs
the script again per device): those ranks run unwatched, with the script's knobs. The watched process learns of
the launch where it happens; under ``tune`` the script stops there, since a trial of one rank in a job paced by
the others measures nothing."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from dataprof.backends.frameworks import in_package
from dataprof.measure.watch.events import RanksStarted, said
from dataprof.measure.watch.sites import relative


class OwnRanks(BaseException):
    """Raised where the script starts its ranks, when the watch stops such a script (``tune``)."""


def _caller() -> str:
    """``file:line`` of the first frame outside the installed torch and dataprof, subprocess and the interpreter's
    frozen modules: where the script launched."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith("<frozen") or path == subprocess.__file__ or in_package(path, "torch", "dataprof")):
            return f"{relative(path)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


def _reexecutes(args: Any, target: str, module: bool) -> bool:
    """Whether a command runs the watched script (or module) again: a launcher's copy of it per rank."""
    words = [str(word) for word in args] if isinstance(args, (list, tuple)) else str(args).split()
    if module:
        return any(a == "-m" and b == target for a, b in zip(words, words[1:], strict=False))
    script = os.path.abspath(target)
    return any(os.path.abspath(word) == script for word in words if word.endswith(".py"))


Launched = Callable[[str, int, str], None]
"""Told ``(how, processes, site)`` when the script starts ranks of its own."""


def watch_subprocesses(target: str, module: bool, launched: Launched, stop: bool) -> None:
    """Call ``launched`` when the script runs itself again in a subprocess (a launcher's copy per rank, as
    Lightning's); with ``stop``, raise :class:`OwnRanks` there."""
    original_popen = subprocess.Popen.__init__

    def popen(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        if _reexecutes(args, target, module):
            launched("the script run again in a subprocess", 1, _caller())
            if stop:
                raise OwnRanks("the script starts its own ranks")
        original_popen(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]


SPAWN_MODULE = "torch.multiprocessing.spawn"
"""Where ``torch.multiprocessing``'s ``spawn`` and ``start_processes`` are defined."""


def watch_spawns(spawning: Any, launched: Launched, stop: bool) -> None:
    """Call ``launched`` when the script starts processes through ``torch.multiprocessing``'s ``spawn`` or
    ``start_processes`` (``spawning``: :data:`SPAWN_MODULE`, as imported), one or several: the training runs in
    them, not in the process watched; with ``stop``, raise :class:`OwnRanks` there."""
    original_start = spawning.start_processes

    def start_processes(fn: Any, args: Any = (), nprocs: int = 1, *rest: Any, **kwargs: Any) -> Any:
        launched("torch.multiprocessing.spawn", nprocs, _caller())  # one rank too: it trains in a child
        if stop:
            raise OwnRanks("the script starts its own ranks")
        return original_start(fn, args, nprocs, *rest, **kwargs)

    spawning.start_processes = start_processes
    package: Any = sys.modules.get("torch.multiprocessing")
    if package is not None and getattr(package, "start_processes", None) is original_start:
        package.start_processes = start_processes


LOADER_WORKERS = ("torch.utils.data", "paddle")
"""The packages whose processes are a DataLoader's own workers, not the script's ranks."""
CHILD_EXIT = 3
"""A process of the script's own ends with this code where it iterates a loader under ``tune``."""


def watch_processes(fd: int, stop: bool) -> None:
    """Processes the script starts itself (``multiprocessing.Process``, any start method; not a DataLoader's
    workers) run their target behind :func:`in_child`: a DataLoader iterated there is the training run unwatched
    in a process of its own, said to the watch on its pipe (``fd`` of this process); with ``stop``, that process
    ends there."""
    from multiprocessing.process import BaseProcess

    original = BaseProcess.start
    here = os.getpid()

    def start(self: Any) -> None:
        target = getattr(self, "_target", None)
        if os.getpid() == here and target is not None and \
                not str(getattr(target, "__module__", "")).startswith(LOADER_WORKERS):
            self._target = functools.partial(in_child, target, here, fd, stop, _caller())
        original(self)

    BaseProcess.start = start  # type: ignore[method-assign]


def in_child(target: Any, parent: int, fd: int, stop: bool, site: str, *args: Any, **kwargs: Any) -> Any:
    """A process of the script's own, started at ``site``: ``target`` run with a DataLoader that, iterated,
    says so to the watch of ``parent`` (on its pipe ``fd``: inherited through fork, reopened through ``/proc``
    otherwise) and, with ``stop``, ends the process."""
    told: list[bool] = []

    def iterated(loader: Any) -> None:
        if not told:
            told.append(True)
            _say(parent, fd, said(RanksStarted("a multiprocessing.Process of its own iterating a loader", 1, site)))
        if stop:
            os._exit(CHILD_EXIT)

    from dataprof.backends.construction import loader_class, patch_loader_modules

    def patch(module: Any) -> None:
        cls = loader_class(module)
        inner = cls.__iter__

        def __iter__(self: Any) -> Any:
            iterated(self)
            return inner(self)

        cls.__iter__ = __iter__

    patch_loader_modules(patch)
    return target(*args, **kwargs)


def _say(parent: int, fd: int, message: dict[str, Any]) -> None:
    """Write ``message`` to the watch's pipe: the descriptor inherited, else the parent's reopened by its path
    (Linux); nothing where neither can be written."""
    from dataprof.measure.protocol import line_of

    data = line_of(message)
    try:
        os.write(fd, data)
        return
    except OSError:
        pass
    try:
        with open(f"/proc/{parent}/fd/{fd}", "wb", buffering=0) as pipe:
            pipe.write(data)
    except OSError:
        return

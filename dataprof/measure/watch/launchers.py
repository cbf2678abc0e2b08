"""A watched script that starts ranks of its own (``torch.multiprocessing.spawn``, as PyTorch's ImageNet example
does with ``--multiprocessing-distributed``; Lightning's ``ddp_spawn`` and its subprocess launcher, which runs
the script again per device): those ranks run unwatched, with the script's knobs. The watched process learns of
the launch where it happens; under ``tune`` the script stops there, since a trial of one rank in a job paced by
the others measures nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from dataprof.backends.frameworks import in_package
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
    """Call ``launched`` when the script starts several processes through ``torch.multiprocessing``'s ``spawn``
    or ``start_processes`` (``spawning``: :data:`SPAWN_MODULE`, as imported); with ``stop``, raise
    :class:`OwnRanks` there."""
    original_start = spawning.start_processes

    def start_processes(fn: Any, args: Any = (), nprocs: int = 1, *rest: Any, **kwargs: Any) -> Any:
        if nprocs > 1:
            launched("torch.multiprocessing.spawn", nprocs, _caller())
            if stop:
                raise OwnRanks("the script starts its own ranks")
        return original_start(fn, args, nprocs, *rest, **kwargs)

    spawning.start_processes = start_processes
    package: Any = sys.modules.get("torch.multiprocessing")
    if package is not None and getattr(package, "start_processes", None) is original_start:
        package.start_processes = start_processes

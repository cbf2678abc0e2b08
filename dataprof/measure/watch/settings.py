"""What ``dataprof run`` (and each run of ``dataprof tune``) watches: the script, its window, what it changes and
its limits; and whether the script can be found."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

from dataprof.errors import TargetError
from dataprof.results.run import RunChanges


@dataclass(frozen=True)
class WatchSettings:
    """What to run and how long to watch it."""

    target: str
    """The script's path, or the module's name with ``module``."""
    args: tuple[str, ...] = ()
    module: bool = False
    max_steps: int | None = None
    """End the watch (and the script) once the busiest loader delivered this many batches."""
    seconds: float | None = None
    """End the watch (and the script) at the first batch after this long."""
    seconds_from_first_batch: bool = False
    """Count ``seconds`` from the first batch (a steady window whatever the start-up takes), not the start."""
    window_from_replay: bool = False
    """Count ``seconds`` and ``max_steps`` from the moment a replay begins (the headspace's window)."""
    cwd: str = field(default_factory=os.getcwd)
    changes: RunChanges | None = None
    """What to change in the script's loaders (``--override``, ``--replay``); None: nothing."""
    limit_s: float | None = None
    startup_s: float | None = None
    """The part of ``limit_s`` allowed for the start-up, before the window opens (named when the limit is reached
    with the window not yet open)."""
    """End the script (SIGINT, then SIGTERM, then SIGKILL) once it has run this long; None: no limit."""
    after_window_s: float | None = None
    """End it so once this long has passed since its window ended (the watch asked it to stop) and it has not."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the script's environment (``DATAPROF_TRIAL`` for tune's runs)."""
    interactive: bool = True
    """Whether the script keeps the terminal's stdin (False: it reads none, ``input()`` gets end of file)."""
    stop_own_ranks: bool = False
    """Stop the script where it starts ranks of its own (``tune``: they would run unwatched); else note it."""
    training: tuple[str | None, str | None] | None = None
    """Count only the training's batches toward the window (``seconds``, ``max_steps``): those of the loader at
    this ``(site, split)``, or with ``(None, None)`` of a loader of the training split, or of no named split asked
    for with autograd on (``tune``: an evaluation before the training is not its window); None: every loader's."""
    end_with_job: bool = False
    """End the script once another rank of its job says its script failed (``tune``'s runs, dataprof's own); under
    ``run`` the training is the user's: no other rank's news ends it (torchrun ends a job whose rank failed)."""


@dataclass(frozen=True)
class WatchLimits:
    """What the watched process is told of its window, its limits and its changes (its argv's JSON, read back
    strictly: ``measure.protocol.read``), from :class:`WatchSettings`."""

    max_steps: int | None = None
    seconds: float | None = None
    seconds_from_first_batch: bool = False
    window_from_replay: bool = False
    changes: RunChanges = field(default_factory=RunChanges)
    stop_own_ranks: bool = False
    training: tuple[str | None, str | None] | None = None

    @classmethod
    def of(cls, settings: WatchSettings) -> WatchLimits:
        """The limits ``settings`` set."""
        return cls(settings.max_steps, settings.seconds, settings.seconds_from_first_batch,
                   settings.window_from_replay, settings.changes or RunChanges(), settings.stop_own_ranks,
                   settings.training)


def check_target(settings: WatchSettings) -> None:
    """TargetError (exit 3) when the script does not exist or the module cannot be found (from where it runs, or
    from here: the watched process looks for it there too)."""
    if settings.module:
        roots = list(dict.fromkeys((settings.cwd, os.getcwd())))  # run elsewhere (--workdir): found where you are
        sys.path[0:0] = roots
        try:
            found = importlib.util.find_spec(settings.target) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            del sys.path[:len(roots)]
        if not found:
            raise TargetError(f"-m {settings.target}: no module of that name can be imported from "
                              f"{' or '.join(roots)}")
    elif not os.path.isfile(os.path.join(settings.cwd, settings.target)):
        raise TargetError(f"{settings.target}: no such script")

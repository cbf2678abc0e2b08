"""The ranks of one job end their watch at the same batch.

Synchronous data-parallel training moves in lockstep: each step all-reduces with every rank. A watch ended by
time on each rank's own clock stops the ranks at different batches, and a rank still stepping then all-reduces
with a rank that has left (gloo: "Connection closed by peer"): the training fails where it should have ended.
So only rank 0's clock counts: at its deadline it names a batch a little ahead, in a file the job's ranks share,
and every rank ends once its own loader has delivered that many batches. The ranks meet through files because
the training's process group is the script's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

MARGIN_BATCHES = 2
"""Rank 0 names the batch this many past its own deadline: a rank in lockstep is at most one batch ahead of it
(it cannot fetch a batch before the step of the last one all-reduced). A rank further ahead (gradients
accumulated over more batches between all-reduces) ends where it is."""
END_FILE = "end.json"
"""The file in :func:`exchange_dir` where rank 0 names the batch to end at."""


def exchange_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the ranks of one job meet (one job, one directory): torchrun's run id, else its rendezvous address."""
    job = env.get("TORCHELASTIC_RUN_ID") or f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    return Path(tempfile.gettempdir()) / f"dataprof-run-{job}"


def job_rank(env: Mapping[str, str]) -> int | None:
    """This process's rank in a job of two or more ranks (torchrun's environment); None otherwise."""
    try:
        world, rank = int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "-1"))
    except ValueError:
        return None
    return None if world < 2 or rank < 0 else rank


class RankEnd:
    """One rank's side of the shared end: rank 0 publishes the batch to end at, the others read it."""

    def __init__(self, path: Path, leader: bool) -> None:
        self.path = path
        self.leader = leader
        self.target: tuple[int, int] | None = None
        """The loader (its number in the script) and its batch count at which every rank ends, once known."""
        if leader:  # a file left by an earlier job with the same id must not end this one
            with contextlib.suppress(OSError):
                path.unlink()

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ) -> RankEnd | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise."""
        rank = job_rank(env)
        return None if rank is None else cls(exchange_dir(env) / END_FILE, rank == 0)

    def publish(self, loader: int, batches: int) -> tuple[int, int]:
        """Rank 0 at its deadline, with its ``loader`` at ``batches``: name the batch every rank ends at."""
        self.target = (loader, batches + MARGIN_BATCHES)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"loader": self.target[0], "batches": self.target[1]}))
        os.replace(tmp, self.path)
        return self.target

    def read(self) -> tuple[int, int] | None:
        """Another rank: the end rank 0 named, once it has (kept from then on)."""
        if self.target is None:
            try:
                data = json.loads(self.path.read_text())
                self.target = (int(data["loader"]), int(data["batches"]))
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return self.target

    def reached(self, loader: int, batches: int, deadline_passed: bool) -> bool:
        """Whether this rank ends now, its ``loader`` having delivered ``batches`` (``deadline_passed``: this
        rank's own clock says the window is over; only rank 0's counts)."""
        if self.target is None:
            if self.leader:
                if not deadline_passed:
                    return False
                self.publish(loader, batches)
            elif self.read() is None:
                return False
        assert self.target is not None
        return loader == self.target[0] and batches >= self.target[1]


FAILED_PREFIX = "failed-"
"""Files in :func:`exchange_dir` by which a rank whose script failed tells the others (``failed-<rank>``)."""


class RankFailures:
    """A job's ranks tell each other when one's script failed, so the others' watches end their scripts at once
    rather than leave them in a collective until its timeout."""

    def __init__(self, directory: Path, rank: int, since: float) -> None:
        self.directory = directory
        self.rank = rank
        self.since = since
        """Wall-clock time this watch began: a file older than it is another job's."""

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ) -> RankFailures | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise."""
        rank = job_rank(env)
        return None if rank is None else cls(exchange_dir(env), rank, time.time())

    def publish(self) -> None:
        """This rank's script failed."""
        with contextlib.suppress(OSError):
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / f"{FAILED_PREFIX}{self.rank}").write_text("")

    def failed(self) -> int | None:
        """The lowest other rank whose script failed since this watch began; None while none has."""
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return None
        ranks = []
        for entry in entries:
            if entry.name.startswith(FAILED_PREFIX) and entry.name[len(FAILED_PREFIX):].isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime >= self.since - 1.0:
                        ranks.append(int(entry.name[len(FAILED_PREFIX):]))
        others = [rank for rank in ranks if rank != self.rank]
        return min(others) if others else None

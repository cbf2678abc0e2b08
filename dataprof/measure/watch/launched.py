"""What the launcher that started this process says of its job, read from its environment here and nowhere else:
torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_USE_AGENT_STORE``), and the size other
launchers set where they start one process per rank without them."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dataprof.results.environment import RankInfo

LAUNCHERS = (("OMPI_COMM_WORLD_SIZE", "mpirun"), ("PMI_SIZE", "an MPI launcher"), ("SLURM_NTASKS", "srun"))
"""Launchers that start a job's ranks one process each, without torchrun's agent: the size they set."""


@dataclass(frozen=True)
class Store:
    """The key-value store torchrun's agent serves the job at ``host:port`` for its life, and the run's id."""

    host: str
    port: int
    run_id: str


@dataclass(frozen=True)
class Launched:
    """A process's environment, as the launcher that started it left it (this process's, or a test's mapping)."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def text(self, name: str) -> str:
        """The variable ``name`` ('' where it is not set)."""
        return self.env.get(name, "")

    def number(self, name: str, default: int) -> int:
        """The variable ``name`` as a number (``default`` where it is not set; ValueError where it does not
        read)."""
        return int(self.text(name) or default)

    @property
    def rank(self) -> int | None:
        """This process's rank in a job of two or more ranks; None otherwise, or where ``RANK`` or ``WORLD_SIZE``
        does not read as a number."""
        try:
            world, rank = self.number("WORLD_SIZE", 1), self.number("RANK", -1)
        except ValueError:
            return None
        return None if world < 2 or rank < 0 else rank

    def rank_info(self, host: str) -> RankInfo | None:
        """Where this process stands in its job of two or more ranks, on ``host``; None outside one. ValueError:
        a variable that does not read as a number."""
        world = self.number("WORLD_SIZE", 1)
        if world < 2 or not self.text("RANK"):
            return None
        return RankInfo(rank=self.number("RANK", 0), world_size=world, local_rank=self.number("LOCAL_RANK", 0),
                        local_world_size=self.number("LOCAL_WORLD_SIZE", 1),
                        node=self.number("GROUP_RANK" if self.text("GROUP_RANK") else "NODE_RANK", 0), host=host)

    @property
    def store(self) -> Store | None:
        """The store torchrun's agent serves the job; None where it serves none (another launcher, or none)."""
        host, port = self.text("MASTER_ADDR"), self.text("MASTER_PORT")
        if self.text("TORCHELASTIC_USE_AGENT_STORE") == str(True) and host and port.isdigit():
            return Store(host, int(port), self.text("TORCHELASTIC_RUN_ID") or "job")
        return None

    @property
    def exchange_dir(self) -> Path:
        """Where the ranks of one job meet without a store (one job, one directory): torchrun's run id, else its
        rendezvous address."""
        job = self.text("TORCHELASTIC_RUN_ID") or \
            f"{self.text('MASTER_ADDR') or 'local'}-{self.text('MASTER_PORT') or '0'}"
        return Path(tempfile.gettempdir()) / f"dataprof-run-{job}"

    def cannot_meet(self) -> str | None:
        """Why this process, one rank of a job over several nodes (or of unknown shape), cannot meet the other
        nodes' ranks: started without torchrun's agent (``srun python train.py``, ``mpirun``, DeepSpeed's
        launcher), there is no store they all reach, and the directory they would meet in is this node's alone.
        None where they can meet (an agent's store, or every rank on this node) or it is no job of several
        ranks."""
        if self.store is not None:
            return None
        if self.rank is not None:
            world, local = self.number("WORLD_SIZE", 1), self.text("LOCAL_WORLD_SIZE")
            if local.isdigit() and int(local) >= world:
                return None
            return (f"this rank is one of {world} started without torchrun's agent, "
                    + ("on more than one node" if local.isdigit() else
                       "its ranks per node unknown (no LOCAL_WORLD_SIZE)"))
        for key, launcher in LAUNCHERS:
            size = self.text(key)
            if size.isdigit() and int(size) > 1:
                return f"this process is one of {size} ranks {launcher} started, with no RANK and WORLD_SIZE set"
        return None

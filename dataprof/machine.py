"""The machine a sweep runs on, as data: the CPUs this process may use and the rank it runs as.

Data layer: measured by ``measure.environment`` and ``distributed``, read everywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuBudget:
    """How many CPUs this process may really use, and why."""

    usable: int
    """CPUs for this process's loader: the node's usable CPUs, shared out among its ranks."""
    affinity: int
    quota: float | None
    cpu_count: int
    ranks_per_node: int = 1

    def explain(self) -> str:
        """Why this many CPUs, in words: affinity, cgroup quota, and the ranks sharing the node."""
        quota = "no cgroup CPU quota" if self.quota is None else f"cgroup quota {self.quota:g} CPUs"
        if self.ranks_per_node > 1:
            return (f"{self.usable} usable CPU{'s' if self.usable != 1 else ''} per rank ({self.ranks_per_node} "
                    f"ranks share this node's "
                    f"{self.node_usable}: affinity {self.affinity} of {self.cpu_count}, {quota})")
        return f"{self.usable} usable CPUs (affinity {self.affinity} of {self.cpu_count}, {quota})"

    @property
    def node_usable(self) -> int:
        """CPUs the node offers this job: affinity, capped by the cgroup quota (rounded up)."""
        return self.affinity if self.quota is None else max(1, min(self.affinity, math.ceil(self.quota)))


@dataclass(frozen=True)
class RankInfo:
    """A process's place in a distributed job (torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_*``, ``GROUP_RANK``)."""

    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    """Ranks on this node (they share its CPUs, RAM and /dev/shm)."""
    node: int = 0
    """``GROUP_RANK``: the node's index in the job."""
    host: str = ""

    @property
    def nodes(self) -> int:
        """Nodes in the job: world size over ranks per node."""
        return max(1, self.world_size // max(1, self.local_world_size))

"""Facts read from the machine: usable CPUs (affinity, cgroup quota), RAM, /dev/shm, open files, CUDA devices."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dataprof.errors import UsageError
from dataprof.results.environment import CpuBudget, Environment, RankInfo
from dataprof.results.vocabulary import Framework


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs allowed by the cgroup CPU quota (v2 ``cpu.max`` or v1 CFS), or None: the tightest on this process's
    own cgroup (``own``, as ``/proc/self/cgroup`` names it: a Slurm job's, a pod's) and every cgroup above it."""
    v2_path, v1_path = _own_cgroups(own)
    limits = [limit for folder in _up(root, v2_path) if (limit := _v2_limit(folder / "cpu.max")) is not None]
    limits += [limit for folder in _up(root / "cpu", v1_path) if (limit := _v1_limit(folder)) is not None]
    return min(limits, default=None)


def _own_cgroups(own: Path) -> tuple[str, str]:
    """This process's cgroup v2 path and its v1 ``cpu`` controller's path (``/`` where not found)."""
    v2 = v1 = "/"
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            v2 = path or "/"
        elif "cpu" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _up(root: Path, path: str) -> list[Path]:
    """``root``/``path`` and each folder above it up to ``root`` itself."""
    parts = [part for part in path.split("/") if part and part != ".."]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_limit(path: Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_limit(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_budget(cgroup_root: Path = Path("/sys/fs/cgroup"), ranks_per_node: int = 1) -> CpuBudget:
    """Usable CPUs from affinity and cgroup quota, never ``os.cpu_count()`` alone; divided among
    ``ranks_per_node`` ranks when several share the node."""
    count = os.cpu_count() or 1
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        affinity = count
    quota = cgroup_cpu_limit(cgroup_root)
    whole = CpuBudget(usable=1, affinity=affinity, quota=quota, cpu_count=count)
    ranks = max(1, ranks_per_node)
    return dataclasses.replace(whole, usable=max(1, whole.node_usable // ranks), ranks_per_node=ranks)


def pinned_cpus(count: int | None, local_rank: int = 0) -> list[int] | None:
    """The CPUs ``--cpus count`` pins a trial to: ``count`` of this process's, the ``local_rank``-th such group
    (so that ranks sharing a node take their own); None without ``--cpus``. A UsageError where the platform
    cannot pin a process (macOS, Windows: no ``sched_setaffinity``)."""
    if count is None:
        return None
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        raise UsageError(f"--cpus {count}: this platform ({platform.system()}) cannot pin a process to CPUs (no "
                         "sched_setaffinity); run without --cpus, or on Linux")
    mine = sorted(os.sched_getaffinity(0))
    start = (local_rank * count) % max(1, len(mine))
    return (mine[start:] + mine[:start])[:count]


def _threads() -> list[int]:
    """The ids of this process's threads (``/proc/self/task``); ``[0]``, the calling thread, without /proc."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return [0]


@contextlib.contextmanager
def pinned_to(cpus: list[int] | None) -> Iterator[None]:
    """Every thread of this process runs on ``cpus`` inside the block, those it starts there too; after it, each
    thread runs where it did before (a thread started inside, where the process did): the caller is left as it
    was. None changes nothing."""
    if cpus is None:
        yield
        return
    whole = os.sched_getaffinity(0)
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid in _threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, before.get(tid, whole))


def available_ram() -> int:
    """Bytes of RAM available now (psutil's ``available``: free plus reclaimable cache)."""
    import psutil

    return int(psutil.virtual_memory().available)



def cuda_devices(framework: str = "torch") -> int:
    """CUDA devices the framework can use; 0 without a driver (checked before importing the framework).

    Asked in the parent process, never in the host that forks the trials:
    CUDA initialised before a fork is unusable after it.
    """
    if sys.platform.startswith("linux") and not os.path.exists("/dev/nvidiactl"):
        return 0
    if framework == Framework.PADDLE:
        from dataprof.backends.frameworks import import_paddle, paddle_available

        if not paddle_available():
            return 0
        paddle = import_paddle()
        return int(paddle.device.cuda.device_count()) if paddle.is_compiled_with_cuda() else 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_environment(device: str, budget: CpuBudget | None = None, gpu_name: str | None = None,
                      start_method: str | None = None, framework: str = "torch",
                      rank: RankInfo | None = None) -> Environment:
    """The machine; under torchrun (``rank``), usable CPUs are this rank's share of its node's."""
    import psutil

    budget = budget or cpu_budget(ranks_per_node=rank.local_world_size if rank else 1)
    memory = psutil.virtual_memory()
    try:
        shm_free: int | None = shutil.disk_usage("/dev/shm").free
    except OSError:
        shm_free = None
    return Environment(
        cpu_count=budget.cpu_count,
        usable_cpus=budget.usable,
        cpu_reason=budget.explain(),
        ram_bytes=memory.total,
        available_ram_bytes=memory.available,
        python=platform.python_version(),
        torch=_version("torch"),
        framework=framework,
        paddle=_version("paddlepaddle") or _version("paddlepaddle-gpu"),
        world_size=rank.world_size if rank else 1,
        nodes=rank.nodes if rank else 1,
        local_world_size=rank.local_world_size if rank else 1,
        cpu_quota=budget.quota,
        device=device,
        gpu_name=gpu_name,
        platform=platform.platform(terse=True),
        start_method=start_method,
        shm_free_bytes=shm_free,
        open_files_limit=open_files_limit()[0],
    )


def open_files_limit() -> tuple[int | None, int | None]:
    """Soft and hard RLIMIT_NOFILE (None: unlimited, or not POSIX)."""
    try:
        import resource
    except ImportError:
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return (None if soft == unlimited else soft), (None if hard == unlimited else hard)


AF_UNIX_PATH_MAX = 107
"""The longest path an AF_UNIX socket binds to on Linux (``sun_path`` less its terminating zero)."""


def worker_socket_chars(tmpdir: str | None = None) -> int:
    """The length of the path a DataLoader worker's socket takes under ``tmpdir`` (``$TMPDIR``): a worker passes
    each batch's tensors through ``multiprocessing``'s resource sharer, listening at ``pymp-XXXXXXXX/
    listener-XXXXXXXX`` there. Past :data:`AF_UNIX_PATH_MAX` the worker's feeder thread fails and the loader
    waits for ever."""
    return len(os.path.join(tmpdir or tempfile.gettempdir(), "pymp-" + 8 * "x", "listener-" + 8 * "x"))


def socket_hang_cause(tmpdir: str | None = None) -> str | None:
    """Why a loader with worker processes hangs here, when its workers' socket path is too long; None otherwise."""
    chars = worker_socket_chars(tmpdir)
    if chars <= AF_UNIX_PATH_MAX:
        return None
    return (f"TMPDIR is too long: its workers' sockets (pymp-…/listener-…) take {chars} characters, over "
            f"AF_UNIX's {AF_UNIX_PATH_MAX}, so no worker can pass a batch; a shorter TMPDIR")

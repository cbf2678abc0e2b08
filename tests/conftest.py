"""What the tests share: where the fixtures' datasets and the recorded documents are, the command line run in
this process, the shortest sweep options, the guard that keeps the fast suite free of processes, and what keeps
tests run side by side (``pytest -n 2``) apart: a temporary directory for each worker, and which processes are
this worker's."""

from __future__ import annotations

import ast
import functools
import multiprocessing.process
import os
import platform
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's source parsed, once for every rule that reads the package (``test_house``, ``test_layers``)."""
    return ast.parse(path.read_text())
FIXTURES = ROOT / "tests" / "fixtures"
DATA = ROOT / "tests" / "data"

Invoke = Callable[..., tuple[int, str, str]]
"""``cli("sweep", TARGET, ...)``: the command's exit code, stdout and stderr."""

platform.platform(terse=True)  # cached from here on: its one `uname -p` is the environment probe's, not a test's


WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This pytest-xdist worker's name (``gw0``), None in a suite run in one process."""


def free_port() -> int:
    """A port no process listens on, for a test's store or rendezvous to listen on a moment later: below the
    system's ephemeral range (Linux: 32768 and up), which the kernel hands to outgoing connections, so another
    test's connection cannot take it in between (it did: ``EADDRINUSE``); each pytest-xdist worker draws from a
    range of its own."""
    lane = int(WORKER[2:]) if WORKER and WORKER[2:].isdigit() else 0
    base = 20000 + (lane % 8) * 1500
    for port in random.sample(range(base, base + 1500), 1500):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + 1499}")


def pytest_configure(config: pytest.Config) -> None:
    """A worker of ``pytest -n`` gets a temporary directory of its own, which every process a test starts
    inherits (``TMPDIR``): a test that looks for the files a command left behind sees only its own worker's."""
    if WORKER is not None:
        os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"pytest-{WORKER}-")
        tempfile.tempdir = None  # read again from TMPDIR


def pytest_unconfigure(config: pytest.Config) -> None:
    if WORKER is not None:
        shutil.rmtree(os.environ["TMPDIR"], ignore_errors=True)


def ours(proc: Any) -> bool:
    """Whether the ``psutil.Process`` ``proc`` was started by this worker's tests: under ``pytest -n`` the other
    workers' sweeps and scripts run beside them. Every process a test starts inherits the worker's name."""
    if WORKER is None:
        return True
    import psutil

    try:
        return bool(proc.environ().get("PYTEST_XDIST_WORKER") == WORKER)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


SHM = Path("/dev/shm")


def shm_names() -> set[str]:
    """The names of the files in /dev/shm now (none where there is no /dev/shm)."""
    return {p.name for p in SHM.iterdir()} if SHM.is_dir() else set()


def shm_left(before: set[str], settle_s: float = 10.0) -> set[str]:
    """The files in /dev/shm that were not in ``before`` and are still there, mapped or held open by no live
    process, ``settle_s`` later: left behind, not the passing files of DataLoaders that other tests run beside
    this one (under ``pytest -n``; a spawn context's semaphores go once its resource tracker ends)."""
    deadline = time.monotonic() + settle_s
    while True:
        names = shm_names() - before
        left = names - _in_use(names) if names else names
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _in_use(names: set[str]) -> set[str]:
    paths = {str(SHM / name): name for name in names}
    used = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            maps = (proc / "maps").read_text()
            fds = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue  # gone, or not ours to read
        used |= {name for path, name in paths.items() if path in maps or path in fds}
    return used


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start processes first (``pytest -n`` then starts the long ones early and fills in with the
    quick ones, rather than leave one worker on a long test at the end); GPU tests skipped without a device."""
    items.sort(key=lambda item: "slow" not in item.keywords)
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="no CUDA device visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def datasets() -> str:
    """The file of the test datasets (``f"{datasets}:Sleepy"`` is a target)."""
    return str(FIXTURES / "datasets.py")


@pytest.fixture
def paddle_datasets() -> str:
    """The file of the test datasets for ``paddle.io``."""
    return str(FIXTURES / "paddle_datasets.py")


@pytest.fixture
def loaders() -> str:
    """The file of the test DataLoader factories and DataModules."""
    return str(FIXTURES / "loaders.py")


@pytest.fixture
def quick() -> list[str]:
    """The shortest trials a sweep's figures still mean something at (a module may extend them), over worker
    processes only: whether threads are tried rests on a GIL measure, and a test of something else should not
    (tests/measure/sweep/test_threads.py asks for both kinds)."""
    return ["--trial-seconds", "0.3", "--prefetch-factor", "2", "--worker-kind", "process"]


@pytest.fixture
def cli() -> Invoke:
    """The ``dataprof`` command line, run in this process."""
    from dataprof.cli import main

    def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        result = CliRunner().invoke(main, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    return invoke


def recorded(kind: str, name: str) -> Any:
    """A recorded document, read back: ``tests/data/<kind>/<name>.json`` (kind: sweep, run or inspect)."""
    from dataprof.results.load import load_document

    return load_document(DATA / kind / f"{name}.json")


def trial(workers: int, rate: float, spread: float = 0.005, status: str = "ok", memory: int = 0) -> Any:
    """A trial of ``w{workers} pf2 persist`` (``w0`` at 0) at ``rate`` samples/s; a failed one says ``boom``."""
    from dataprof.results.knobs import LoaderConfig
    from dataprof.results.trial import TrialResult

    config = LoaderConfig(workers, False, 2 if workers else None, workers > 0)
    return TrialResult.of(config, status, samples_per_s=rate if status == "ok" else None,
                          samples_per_s_spread=spread, peak_memory_bytes=memory,
                          error=None if status == "ok" else "boom")


def run_report(wait: float, workers: int = 2, workers_cpu: float | None = 20.0, main_cpu: float = 30.0,
               module: str = "__main__", machine: float = 40.0) -> Any:
    """A watched run's document: one loader waiting ``wait`` of each iteration, and the CPU figures given."""
    from dataprof.results.environment import Environment
    from dataprof.results.run import LoaderRun, RunReport, RunResources
    from dataprof.results.trial import Percentiles

    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2.13", device="cpu")
    loader = LoaderRun(site="train.py:40", dataset="Images", dataset_module=module,
                       dataset_file="train.py" if module == "__main__" else "/site-packages/mypkg/data.py",
                       loader_class="DataLoader", framework="torch",
                       batch_size=32, num_workers=workers, prefetch_factor=2, persistent_workers=True,
                       pin_memory=False, batches=500, epochs=1, steady_batches=490, samples_per_s=800.0,
                       data_wait_fraction=wait, wait_ms=Percentiles(10 * wait, 20 * wait, mean=10 * wait),
                       step_ms=Percentiles(40.0, 45.0, mean=41.0), first_batch_s=(0.8,))
    return RunReport(tool_version="0", command=("train.py", "--epochs", "1"), environment=env, loaders=(loader,),
                     resources=RunResources(cpu_percent=(workers_cpu or 0) + main_cpu, main_cpu_percent=main_cpu,
                                            workers_cpu_percent=workers_cpu, cpu_percent_system=machine),
                     wall_s=30.0, exit_code=0)


def decided(name: str) -> Any:
    """A recorded sweep, decided again by the current rules."""
    from dataprof.decide.sweep import decide

    return decide(recorded("sweep", name))


def scaled(report: Any, factor: float) -> Any:
    """The same sweep with every throughput multiplied by ``factor``, decided again."""
    import dataclasses

    from dataprof.decide.sweep import decide

    return decide(dataclasses.replace(report, trials=tuple(
        dataclasses.replace(t, samples_per_s=t.samples_per_s * factor) if t.samples_per_s else t
        for t in report.trials)))


class StartsProcesses(Exception):
    """A test not marked ``slow`` tried to start a process."""


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``pytest -m "not slow"`` stays a suite of seconds: a test that starts a process must be marked slow."""
    if "slow" in request.keywords:
        yield
        return

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StartsProcesses(f"{request.node.nodeid} starts a process: mark it @pytest.mark.slow")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    yield

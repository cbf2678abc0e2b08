from __future__ import annotations

import multiprocessing.process
import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "datasets.py"
DATA = ROOT / "tests" / "data"

platform.platform(terse=True)  # cached from here on: its one `uname -p` is the environment probe's, not a test's


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="no CUDA device visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_target() -> str:
    return str(FIXTURES)


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

"""Thread trials end to end: measured beside processes, checked for thread safety first, and failing with the
index and line of a sample that raises in a thread, or with the trial when a thread hangs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Invoke

pytest.importorskip("torchdata.nodes")
pytestmark = pytest.mark.slow


@pytest.fixture
def quick(quick: list[str]) -> list[str]:
    """The shortest trials, of exactly the configs asked for, both kinds at each count."""
    return [*quick, "--strategy", "grid", "--no-rules-of-thumb", "--worker-kind", "process,thread"]


def sweep(cli: Invoke, target: str, out: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = cli("sweep", target, "--batch-size", "8", "--workers", "0,2", *options, "--json", str(out))
    return code, json.loads(out.read_text()), stdout + stderr


def test_threads_are_measured_beside_processes(tmp_path: Path, cli: Invoke, datasets: str,
                                               quick: list[str]) -> None:
    code, report, text = sweep(cli, f"{datasets}:Sleepy", tmp_path / "run.json", *quick)
    assert code == 0, text
    kinds = {(t["config"]["worker_kind"], t["config"]["num_workers"]): t for t in report["trials"]}
    assert set(kinds) == {("process", 0), ("process", 2), ("thread", 2)}
    thread = kinds[("thread", 2)]
    assert thread["status"] == "ok" and thread["worker_processes"] == 0
    assert thread["config"]["persistent_workers"] is None
    # 2 threads each sleeping 5 ms a sample: at most 400 samples/s (the analytic ceiling), and more than one can
    assert 200 < thread["samples_per_s"] <= 420
    assert report["thread_check"]["verdict"] == "same"
    assert report["worker_kinds"]["thread"]["worker_kind"] == "thread"
    assert "kinds: " in text and "t2 pf2" in text


def test_a_dataset_that_is_not_thread_safe_fails_its_thread_trials(tmp_path: Path, cli: Invoke, datasets: str,
                                                                   quick: list[str]) -> None:
    code, report, _ = sweep(cli, f"{datasets}:SharedCursor", tmp_path / "run.json", *quick)
    assert code == 0
    thread = next(t for t in report["trials"] if t["config"]["worker_kind"] == "thread")
    assert thread["status"] == "failed" and "not thread-safe" in thread["error"]
    assert report["thread_check"]["verdict"] == "differs"
    assert report["best"]["config"]["worker_kind"] == "process"


def test_a_sample_raising_in_a_thread_names_its_index_and_line(tmp_path: Path, cli: Invoke, datasets: str,
                                                               quick: list[str]) -> None:
    code, report, _ = sweep(cli, f"{datasets}:RaisesInThreads", tmp_path / "run.json", *quick)
    assert code == 0
    thread = next(t for t in report["trials"] if t["config"]["worker_kind"] == "thread")
    assert thread["status"] == "failed"
    assert "dataset[5] raised RuntimeError: decoder state is per thread (at " in thread["error"]
    assert "datasets.py:" in thread["error"]


def test_a_thread_that_hangs_ends_with_its_trial(tmp_path: Path, cli: Invoke, datasets: str,
                                                 quick: list[str]) -> None:
    code, report, _ = sweep(cli, f"{datasets}:HangsInThreads", tmp_path / "run.json", *quick,
                            "--trial-timeout", "3")
    assert code == 0
    thread = next(t for t in report["trials"] if t["config"]["worker_kind"] == "thread")
    assert thread["status"] == "timeout"
    assert report["thread_check"]["verdict"] == "failed"
    assert any(t["status"] == "ok" and t["config"]["num_workers"] == 2 for t in report["trials"])

"""``--cpus N`` on sweep and inspect: the work runs on N of the usable CPUs, and says so; more than there are is
one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import dataprof
from tests.conftest import FIXTURES, Invoke

USABLE = len(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(USABLE < 2, reason="pinning to one CPU shows only where there are two")


@pytest.mark.parametrize("command", ["sweep", "inspect"])
@pytest.mark.parametrize("cpus", ["0", str(USABLE + 1)])
def test_more_cpus_than_usable_or_none_is_one_line(command: str, cpus: str, cli: Invoke, datasets: str) -> None:
    code, stdout, stderr = cli(command, f"{datasets}:Tiny", "--cpus", cpus)
    assert code == 2 and stdout == ""
    assert stderr.startswith(f"error: --cpus {cpus}: this process may use ") and f"give 1 to {USABLE}" in stderr
    assert stderr.count("\n") == 1


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_inspect_measures_on_that_many_cpus_and_gives_them_back(tmp_path: Path, cli: Invoke) -> None:
    before = os.sched_getaffinity(0)
    out = tmp_path / "inspect.json"
    code, _, stderr = cli("inspect", f"{FIXTURES / 'stages.py'}:Staged", "--samples", "10", "--batch-size", "4",
                          "--cpus", "1", "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["environment"]["usable_cpus"] == 1 and doc["settings"]["cpus"] == 1
    assert os.sched_getaffinity(0) == before


@two_cpus
@pytest.mark.slow
def test_a_sweep_on_one_cpu_keeps_every_trial_on_it(tmp_path: Path, cli: Invoke, datasets: str) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:Busy", "--batch-size", "8", "--workers", "0,2", "--cpus", "1",
                               "--trial-seconds", "1", "--prefetch-factor", "2", "--no-rules-of-thumb",
                               "--worker-kind", "process", "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["settings"]["cpus"] == 1 and doc["environment"]["usable_cpus"] == 1
    two = next(t for t in doc["trials"] if t["config"]["num_workers"] == 2)
    assert two["status"] == "ok" and two["cpu_percent"] <= 115  # two spinning workers share one CPU
    assert doc["model"]["cpus"] <= 1
    assert "1 usable CPU" in stdout or "pinned" in stdout


@two_cpus
@pytest.mark.slow
def test_the_api_pins_a_dataset_object_s_trials_too() -> None:
    from tests.fixtures.datasets import Busy

    report = dataprof.sweep(Busy(), batch_size=8, workers=[2], cpus=1, trial_seconds=1.0, rules_of_thumb=False,
                            prefetch_factor=[2], worker_kind="process")
    two = next(t for t in report.trials if t.config.num_workers == 2)
    assert two.status == "ok" and two.cpu.cpu_percent is not None and two.cpu.cpu_percent <= 115
    assert report.environment.usable_cpus == 1

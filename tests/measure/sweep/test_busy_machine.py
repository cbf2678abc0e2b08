"""A sweep on a machine another process keeps busy: the competition is measured and named, never hidden."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dataprof.cli import main


@pytest.mark.slow
def test_a_busy_loop_beside_the_sweep_is_measured_and_named(tmp_path: Path, datasets: str) -> None:
    out = tmp_path / "run.json"
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        result = CliRunner().invoke(main, ["sweep", f"{datasets}:Sleepy", "--arg", "sleep_ms=2", "--batch-size", "8",
                                           "--workers", "0,2", "--trial-seconds", "1", "--prefetch-factor", "2",
                                           "--no-rules-of-thumb", "--worker-kind", "process", "--json", str(out)])
    finally:
        hog.kill()
        hog.wait()
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    trials = [t for t in data["trials"] if t["status"] == "ok"]
    assert trials and all(t["foreign_cpu_percent"] >= 50 for t in trials)  # the loop held about one core
    busy = next(f for f in data["diagnosis"]["findings"] if f["id"] == "busy_machine")
    usable = data["environment"]["usable_cpus"]
    assert busy["evidence"].startswith("other processes used ") and f"of {usable} usable CPUs" in busy["evidence"]
    assert "other processes used" in result.stdout
    for trial in trials:  # a memory reading not taken is null, never 0 (no workers hold 0 bytes: that is read)
        keys = ["main_uss_bytes", "peak_memory_bytes"]
        keys += ["workers_uss_start_bytes", "workers_uss_end_bytes"] if trial["config"]["num_workers"] else []
        for key in keys:
            assert trial[key] is None or trial[key] > 0, (key, trial["config"])

"""Real sweeps on a CUDA device (skipped where none is visible; run by .ci/gpu-smoke.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dataprof.cli import main
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def test_cuda_sweep_measures_copies_pinning_and_gpu_utilisation(tmp_path: Path, datasets: str) -> None:
    out = tmp_path / "run.json"
    result = CliRunner().invoke(main, [
        "sweep", f"{datasets}:Sleepy", "--arg", "sleep_ms=1", "--batch-size", "32", "--workers", "0,2",
        "--prefetch-factor", "2", "--pin-memory", "on,off", "--step-ms", "5", "--device", "cuda",
        "--trial-seconds", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["environment"]["device"] == "cuda:0" and data["environment"]["gpu_name"]
    pins = {t["config"]["pin_memory"] for t in data["trials"] if t["config"]["num_workers"] == 2}
    assert pins == {True, False}
    for trial in data["trials"]:
        assert trial["status"] == "ok", trial
        assert trial["copy_ms_mean"] > 0
        assert trial["step_ms_mean"] == pytest.approx(5.0, rel=0.5)
    measured = [t["gpu_util_percent"] for t in data["trials"] if t["gpu_util_percent"] is not None]
    assert measured or any("GPU utilisation not measured" in note for note in data["notes"])
    assert "no_gpu" not in [f["id"] for f in data["diagnosis"]["findings"]]


def test_two_cuda_ranks_bind_their_local_device_and_report_together(tmp_path: Path, datasets: str) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "run.json"
    root = ROOT
    proc = subprocess.run(
        [sys.executable, "-m", "dataprof", "sweep", f"{datasets}:Sleepy", "--arg", "sleep_ms=1", "--batch-size", "32",
         "--workers", "0,2", "--prefetch-factor", "2", "--step-ms", "5", "--device", "cuda", "--trial-seconds", "1",
         "--no-rules-of-thumb", "--nproc-per-node", "2", "--json", str(out)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["environment"]["world_size"] == 2 and data["environment"]["device"] == "cuda:0"
    for trial in data["trials"]:
        assert trial["status"] == "ok" and len(trial["ranks"]) == 2, trial
        assert trial["copy_ms_mean"] > 0

"""CI use from the command line: gates that exit 1, compare, the HTML report, --require-gpu."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from dataprof.decide.compare import compare
from dataprof.results.sweep import Report
from tests.conftest import DATA, Invoke, decided, scaled


def save(report: Report, path: Path) -> str:
    path.write_text(report.to_json())
    return str(path)


@pytest.mark.slow
def test_sweep_gates_exit_1_and_keep_the_results(tmp_path: Path, cli: Invoke, datasets: str, quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:Tiny", "--workers", "0", "--no-rules-of-thumb", *quick,
                               "--min-throughput", "1e12", "--min-speedup", "0.5", "--json", str(out))
    assert code == 1
    assert "gate failed: min_throughput" in stderr and "min_speedup" not in stderr
    doc = json.loads(out.read_text())
    assert [(g["gate"], g["passed"]) for g in doc["gates"]] == [("min_throughput", False), ("min_speedup", True)]
    assert "Recommended" in stdout
    # baselines 10× slower and 10× faster than this run, so the gate's verdict cannot hang on the machine's noise
    for scale, expected in ((0.1, 0), (10.0, 1)):
        baseline = tmp_path / f"baseline-{scale}.json"
        baseline.write_text(json.dumps(_scaled_rates(doc, scale)))
        code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--workers", "0", "--no-rules-of-thumb", *quick,
                              "--baseline", str(baseline), "--max-regression", "50%")
        assert code == expected, stderr
        assert ("gate failed: max_regression" in stderr) == bool(expected)


def _scaled_rates(doc: object, scale: float) -> object:
    """A copy of a JSON document with every ``samples_per_s`` figure times ``scale``."""
    if isinstance(doc, dict):
        return {k: v * scale if k == "samples_per_s" and isinstance(v, float) else _scaled_rates(v, scale)
                for k, v in doc.items()}
    return [_scaled_rates(v, scale) for v in doc] if isinstance(doc, list) else doc


@pytest.mark.slow
def test_require_gpu_is_a_usage_error_without_cuda(cli: Invoke, datasets: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--require-gpu")
    assert code == 2 and "--require-gpu: no CUDA device" in stderr


@pytest.mark.parametrize("args, message", [
    (["--max-regression", "10%"], "needs --baseline"),
    (["--baseline", "/nonexistent.json"], "cannot read a JSON result"),
])
def test_gate_usage_errors(args: list[str], message: str, cli: Invoke, datasets: str) -> None:
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", *args)
    assert code == 2 and message in stderr


def test_compare_regression_improvement_and_machines(tmp_path: Path, cli: Invoke) -> None:
    report = decided("io_bound")
    old = save(report, tmp_path / "old.json")
    faster = save(scaled(report, 1.3), tmp_path / "faster.json")
    slower = save(scaled(report, 0.7), tmp_path / "slower.json")
    code, stdout, _ = cli("compare", old, faster)
    assert code == 0 and "+30.0%" in stdout and "same environment" in stdout
    code, stdout, stderr = cli("compare", old, slower, "--max-regression", "10%")
    assert code == 1 and "REGRESSION" in stdout and "regression:" in stderr
    assert cli("compare", old, slower, "--max-regression", "40%")[0] == 0
    other = dataclasses.replace(scaled(report, 0.7), environment=dataclasses.replace(report.environment,
                                                                                      torch="9.9"))
    code, stdout, stderr = cli("compare", old, save(other, tmp_path / "other.json"))
    assert code == 1 and "different environments" in stdout and "torch" in stdout
    assert "across different environments" in stderr
    comparison = compare(report, report)
    assert len(comparison.common) == len(report.trials) and comparison.change == 0



def test_compare_names_the_limits_that_changed_what_workers_could_hold_and_not_free_memory_s_drift() -> None:
    report = decided("io_bound")
    env = report.environment
    assert env.shm_free_bytes and env.ram_bytes
    drift = dataclasses.replace(env, shm_free_bytes=int(env.shm_free_bytes * 0.8), ram_bytes=env.ram_bytes + 1)
    assert compare(report, dataclasses.replace(report, environment=drift)).environment_changes == ()
    docker = dataclasses.replace(env, shm_free_bytes=64 * 2**20, start_method="spawn", open_files_limit=1024)
    changes = compare(report, dataclasses.replace(report, environment=docker)).environment_changes
    assert f"start method: {env.start_method} → spawn" in changes and "/dev/shm free: " in "; ".join(changes)
    assert any(change.startswith("open-file limit: ") and change.endswith(" → 1024") for change in changes)
    assert next(c for c in changes if c.startswith("/dev/shm free: ")).endswith(" → 67.1MB")

def test_compare_rejects_what_is_not_a_result(tmp_path: Path, cli: Invoke) -> None:
    old = save(decided("io_bound"), tmp_path / "old.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema_version": 1, "tool": {"name": "dataprof"}, "trials": [')
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}')
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**json.loads(Path(old).read_text()), "schema_version": 99}))
    inspected = tmp_path / "inspect.json"
    inspected.write_text(json.dumps({"schema_version": 1, "tool": {"name": "dataprof"}, "kind": "inspect"}))
    for path, message in [(corrupt, "cannot read a JSON result"), (foreign, "not a dataprof result"),
                          (future, "schema_version 99 is not supported"), (inspected, "not a sweep result")]:
        code, _, stderr = cli("compare", old, str(path))
        assert code == 2 and message in stderr and "Traceback" not in stderr



def test_a_saved_document_with_figures_no_run_writes_is_malformed_in_one_line_not_a_traceback(
        tmp_path: Path, cli: Invoke) -> None:
    data = json.loads(decided("io_bound").to_json())
    data["environment"]["usable_cpus"] = 0  # no CPU to run on: the pipeline's model divides by it
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    code, stdout, stderr = cli("diagnose", str(broken))
    assert code == 2 and f"error: {broken}: a malformed dataprof document (ZeroDivisionError" in stderr, stderr
    assert "Traceback" not in stdout + stderr
    data["dataset"]["init_s"] = None  # null where a time goes: said as it is read, the field named
    nulled = tmp_path / "nulled.json"
    nulled.write_text(json.dumps(data))
    for command in (["diagnose", str(nulled)], ["report", str(nulled), "--html", str(tmp_path / "r.html")]):
        code, stdout, stderr = cli(*command)
        assert code == 2 and f"error: {nulled}: malformed dataprof result (ValueError: 'init_s' is null" in stderr
        assert "Traceback" not in stdout + stderr
    code, _, stderr = cli("diagnose", str(broken), "--debug")
    assert code == 2 and "Traceback" in stderr  # --debug shows where it failed

def test_html_report_is_self_contained_with_its_charts(tmp_path: Path, cli: Invoke) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "report.html"
    code, _, stderr = cli("report", str(DATA / "sweep" / "memory_bound.json"), "--html", str(out))
    assert code == 0, stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("Plotly.newPlot(") == 4
    assert not re.findall(r"<script[^>]*\bsrc=", page)  # every script is inline
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)  # plotly.js mentions URLs in strings
    for external in ("http://", "https://", "<link", "@import", "<iframe"):
        assert external not in markup
    report = decided("memory_bound")
    assert page.count("<tr class=") == len(report.trials)
    assert "Memory (peak PSS" in page and "--memory-limit" in page and "available RAM" in page
    assert report.findings[0].evidence.split(";")[0][:40].replace("'", "&#x27;") in page



"""CI use: gates, compare, the HTML report, the terminal chart and the Python API."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch.utils.data import Dataset

import dataprof
from dataprof.cli import main
from dataprof.decide.compare import compare
from dataprof.decide.gates import Gates, evaluate
from dataprof.decide.sweep import decide
from dataprof.render.console import render
from dataprof.results.sweep import Report

RUNS = Path(__file__).parent / "data" / "sweep"
FIX = str(Path(__file__).parent / "fixtures" / "datasets.py")
QUICK = ["--trial-seconds", "0.3", "--prefetch-factor", "2"]


def run(name: str) -> Report:
    return decide(Report.from_dict(json.loads((RUNS / f"{name}.json").read_text())))


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def scaled(report: Report, factor: float) -> Report:
    """The same run with every throughput multiplied by ``factor``."""
    return decide(dataclasses.replace(report, trials=tuple(
        dataclasses.replace(t, samples_per_s=t.samples_per_s * factor) if t.samples_per_s else t
        for t in report.trials)))


def save(report: Report, path: Path) -> str:
    path.write_text(report.to_json())
    return str(path)


def gate(report: Report, gates: Gates, baseline: Report | None = None) -> tuple[bool, str]:
    (result,) = evaluate(report, gates, baseline)
    return result.passed, result.message


def test_throughput_and_speedup_gates_pass_and_fail() -> None:
    report = run("io_bound")
    rate = report.recommendation.samples_per_s  # type: ignore[union-attr]
    assert gate(report, Gates(min_throughput=rate * 0.9))[0]
    passed, message = gate(report, Gates(min_throughput=rate * 1.1))
    assert not passed and f"{rate:,.1f}" in message
    speedup = report.recommendation.speedup_vs_baseline  # type: ignore[union-attr]
    assert gate(report, Gates(min_speedup=speedup - 0.1))[0]
    assert not gate(report, Gates(min_speedup=speedup + 0.1))[0]


def test_fail_on_severity_gate() -> None:
    critical = run("io_bound")  # critical: the loop waits most of each iteration
    assert not gate(critical, Gates(fail_on="critical"))[0]
    healthy = run("model_bound")
    assert gate(healthy, Gates(fail_on="warning"))[0]
    assert "io_bound (critical)" in gate(critical, Gates(fail_on="warning"))[1]


def test_regression_gate_against_a_baseline() -> None:
    report = run("io_bound")
    assert gate(report, Gates(max_regression=0.1), report)[0]
    passed, message = gate(report, Gates(max_regression=0.1), scaled(report, 1.5))
    assert not passed and "-33.3%" in message
    assert gate(report, Gates(max_regression=0.1), scaled(report, 0.5))[0]  # an improvement passes
    elsewhere = dataclasses.replace(scaled(report, 1.5), environment=dataclasses.replace(
        report.environment, usable_cpus=16, cpu_count=16))
    assert "different environments: usable CPUs: 16 → 2" in gate(report, Gates(max_regression=0.1), elsewhere)[1]


@pytest.mark.slow
def test_sweep_gates_exit_1_and_keep_the_results(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{FIX}:Tiny", "--workers", "0", "--no-rules-of-thumb", *QUICK,
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
        code, _, stderr = cli("sweep", f"{FIX}:Tiny", "--workers", "0", "--no-rules-of-thumb", *QUICK,
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
def test_require_gpu_is_a_usage_error_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    code, _, stderr = cli("sweep", f"{FIX}:Tiny", "--require-gpu")
    assert code == 2 and "--require-gpu: no CUDA device" in stderr


@pytest.mark.parametrize("args, message", [
    (["--max-regression", "10%"], "needs --baseline"),
    (["--baseline", "/nonexistent.json"], "cannot read a JSON result"),
])
def test_gate_usage_errors(args: list[str], message: str) -> None:
    code, _, stderr = cli("sweep", f"{FIX}:Tiny", *args)
    assert code == 2 and message in stderr


def test_compare_regression_improvement_and_machines(tmp_path: Path) -> None:
    report = run("io_bound")
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


def test_compare_rejects_what_is_not_a_result(tmp_path: Path) -> None:
    old = save(run("io_bound"), tmp_path / "old.json")
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


def test_html_report_is_self_contained_with_its_charts(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "report.html"
    code, _, stderr = cli("report", str(RUNS / "memory_bound.json"), "--html", str(out))
    assert code == 0, stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("Plotly.newPlot(") == 4
    assert not re.findall(r"<script[^>]*\bsrc=", page)  # every script is inline
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)  # plotly.js mentions URLs in strings
    for external in ("http://", "https://", "<link", "@import", "<iframe"):
        assert external not in markup
    report = run("memory_bound")
    assert page.count("<tr class=") == len(report.trials)
    assert "Memory (peak PSS" in page and "--memory-limit" in page and "available RAM" in page
    assert report.findings[0].evidence.split(";")[0][:40].replace("'", "&#x27;") in page


def test_terminal_chart_shows_the_curve() -> None:
    text = render(run("io_bound"))
    assert "Throughput by num_workers" in text
    bars = [line for line in text.splitlines() if "│" in line and line.strip().startswith("w")]
    lengths = [line.count("█") for line in bars]
    assert len(bars) >= 3 and lengths == sorted(lengths)  # io-bound: more workers, longer bars


@pytest.mark.slow
def test_python_api_on_a_dataset_object_defined_here() -> None:
    class Local(Dataset):  # not importable from anywhere: the API must not need an import path
        def __len__(self) -> int:
            return 256

        def __getitem__(self, index: int) -> torch.Tensor:
            return torch.full((4,), float(index))

    report = dataprof.sweep(Local(), batch_size=8, workers=[0, 2], prefetch_factor=2, trial_seconds=0.3,
                            rules_of_thumb=False)
    assert {t.config.num_workers for t in report.trials} == {0, 2}
    assert report.best is not None and report.best.samples_per_s > 0
    assert report.diagnosis["primary"] is not None
    assert json.loads(report.to_json())["best"]["config"] == report.best.config.to_dict()
    assert "Recommended" in report._repr_html_() and "<script" not in report._repr_html_()
    inspection = dataprof.inspect(Local(), samples=20, batch_size=4)
    assert json.loads(inspection.to_json())["samples"]["count"] == 20
    assert "CPU ceiling" in inspection._repr_html_()


@pytest.mark.slow
def test_python_api_on_a_target_string() -> None:
    report = dataprof.sweep(f"{FIX}:Tiny", batch_size=8, workers="0", trial_seconds=0.3, rules_of_thumb=False)
    assert report.best is not None and report.best.config.num_workers == 0

"""``dataprof inspect`` on the command line: its document, its exit codes, its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, Invoke

STAGES = str(FIXTURES / "stages.py")


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_json_has_the_documented_keys(tmp_path: Path, cli: Invoke) -> None:
    out = tmp_path / "inspect.json"
    code, stdout, _ = cli("inspect", f"{STAGES}:SlowIndices", "--samples", "60", "--batch-size", "8", "--json",
                          str(out))
    assert code == 0, stdout
    doc = json.loads(out.read_text())
    assert doc["tool"]["name"] == "dataprof" and doc["kind"] == "inspect"
    assert set(doc["samples"]["latency_ms"]) >= {"p50", "p95", "p99", "max"}
    assert doc["samples"]["slowest"][0]["index"] in (3, 17, 42)
    ms = [s["ms"] for s in doc["samples"]["slowest"]]
    assert ms == sorted(ms, reverse=True)
    assert doc["transforms"] == []
    assert doc["cpu_ceiling_samples_per_s"] > 0 and doc["bytes_per_sample"] == 16
    assert doc["bytes_per_batch"] == 8 * 16
    assert "Per sample" in stdout and "Checks" in stdout


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
def test_json_transforms_are_largest_share_first(tmp_path: Path, cli: Invoke) -> None:
    out = tmp_path / "inspect.json"
    code, _, _ = cli("inspect", f"{STAGES}:Staged", "--samples", "10", "--batch-size", "4", "--json", str(out))
    assert code == 0
    transforms = json.loads(out.read_text())["transforms"]
    assert [t["name"] for t in transforms][:2] == ["Heavy", "Medium"]
    assert all(set(t) >= {"name", "mean_ms", "share"} for t in transforms)


def test_a_raising_index_is_reported_and_exits_3(tmp_path: Path, cli: Invoke) -> None:
    out = tmp_path / "inspect.json"
    code, stdout, stderr = cli("inspect", f"{STAGES}:RaisesAtFive", "--samples", "30", "--batch-size", "4",
                               "--json", str(out))
    assert code == 3
    assert "dataset[5]" in stderr and "corrupt record 5" in stderr and "Traceback" not in stderr
    doc = json.loads(out.read_text())
    assert doc["samples"]["errors"][0]["index"] == 5 and doc["samples"]["count"] == 29
    assert "Per sample" in stdout


def test_samples_that_cannot_be_collated_exit_3(cli: Invoke) -> None:
    code, _, stderr = cli("inspect", f"{STAGES}:Ragged", "--samples", "10", "--batch-size", "4")
    assert code == 3 and "collating a batch failed" in stderr


@pytest.mark.parametrize("args, message", [
    (["nope.py:X"], "target file not found"),
    ([f"{STAGES}:Staged", "--samples", "0"], "--samples"),
    ([f"{STAGES}:Staged", "--arg", "bad"], "expected KEY=VALUE"),
])
def test_bad_input_is_one_line(args: list[str], message: str, cli: Invoke) -> None:
    code, _, stderr = cli("inspect", *args)
    assert code in (2, 3) and message in stderr and "Traceback" not in stderr

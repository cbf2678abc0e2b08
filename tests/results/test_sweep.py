"""A sweep's document: its JSON round trip and keys."""

from __future__ import annotations

import dataclasses
import json

from dataprof.results.sweep import Report
from tests.conftest import recorded, trial


def test_json_round_trip_is_lossless() -> None:
    report = recorded("sweep", "latency")
    again = Report.from_dict(json.loads(report.to_json()))
    assert again == report


def test_json_has_the_documented_keys() -> None:
    data = json.loads(recorded("sweep", "latency").to_json())
    assert data["schema_version"] == 1
    for key in ("tool", "target", "environment", "settings", "trials", "baseline", "best", "diagnosis", "search"):
        assert key in data
    first = data["trials"][0]
    for key in ("config", "status", "error", "samples_per_s", "first_batch_s", "wait_fraction", "wait_ms",
                "cpu_percent", "peak_memory_bytes", "gpu_util_percent"):
        assert key in first
    assert data["baseline"]["config"]["num_workers"] == 0
    assert data["best"]["speedup_vs_baseline"] > 1


def test_nan_becomes_null() -> None:
    report = dataclasses.replace(recorded("sweep", "latency"), trials=(trial(2, float("nan")),))
    assert json.loads(report.to_json())["trials"][0]["samples_per_s"] is None

"""``dataprof plan`` on saved sweeps: the same plan as the API, and bad input as one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import dataprof
from dataprof.cli import main
from tests.conftest import DATA

SWEEP = DATA / "sweep" / "cpu_bound.json"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["plan", *args], env={"COLUMNS": "120", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def test_the_command_and_the_api_give_the_same_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, stdout, _ = invoke(str(SWEEP), "--cpus", "3.5", "--step-ms", "40", "--ram", "8GB", "--json", str(out))
    assert code == 0 and "for: 3.5 CPUs, one rank" in stdout
    planned = dataprof.plan(str(SWEEP), cpus=3.5, step_ms=40, ram="8GB")
    assert json.loads(out.read_text()) == planned.to_dict()
    assert planned.machine.ram_bytes == 8_000_000_000
    assert f"DataLoader(dataset, batch_size=8, num_workers={planned.recommended.num_workers}," in stdout


def test_the_api_takes_a_report_in_hand() -> None:
    from dataprof.results.load import load_document

    report = load_document(SWEEP)
    assert dataprof.plan(report, cpus=1) == dataprof.plan(SWEEP, cpus=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("args", "says"), [
    ((str(SWEEP), "--cpus", "0"), "--cpus 0: must be above 0"),
    ((str(SWEEP), "--ram", "-1GB"), "--ram: '-1GB' must be positive"),
    ((str(SWEEP), "--shm", "50%"), "--shm: '50%' is not a size in bytes"),
    ((str(SWEEP), "--ranks-per-node", "0"), "--ranks-per-node 0: must be above 0"),
    ((str(SWEEP), "--step-ms", "-1"), "--step-ms -1: must be 0 or more"),
    ((str(SWEEP), "--cpus", "inf"), "--cpus inf: must be a finite number"),
    ((str(SWEEP), "--cpus", "nan"), "--cpus nan: must be a finite number"),
    ((str(SWEEP), "--step-ms", "nan"), "--step-ms nan: must be a finite number"),
    ((str(SWEEP), "--step-ms", "inf"), "--step-ms inf: must be a finite number"),
    ((str(DATA / "run" / "train_w2.json"),), "a `dataprof run` result, not a sweep result"),
    ((str(DATA / "plan" / "node.json"),), "a `dataprof plan` result, not a sweep result"),
    ((str(DATA / "sweep" / "latency.json"),), "3 of 3 trials completed; a plan fits its model to at least two"),
    (("missing.json",), "missing.json: cannot read a JSON result"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    code, stdout, stderr = invoke(*args)
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: ") and says in stderr and stderr.count("\n") == 1


def test_a_document_of_an_unknown_kind_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text(json.dumps({**json.loads(SWEEP.read_text()), "kind": "forecast"}))
    code, _, stderr = invoke(str(path))
    assert code == 2 and "of kind 'forecast', which this dataprof does not read" in stderr

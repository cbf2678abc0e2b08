"""What a user sees, held: every recorded document in tests/data, re-rendered through ``dataprof diagnose`` and
``dataprof report``, and every command's ``--help``, gives the text its golden copy in tests/data/golden holds.

A change that means to alter what users see regenerates the copies (``DATAPROF_UPDATE_GOLDEN=1 pytest
tests/cli/test_golden.py``) and the diff shows it in review; a refactoring leaves them as they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dataprof.cli import main
from tests.conftest import DATA

GOLDEN = DATA / "golden"
UPDATE = os.environ.get("DATAPROF_UPDATE_GOLDEN") == "1"
ENV = {"COLUMNS": "120", "NO_COLOR": "1"}

SWEEPS = sorted((DATA / "sweep").glob("*.json"))
RUNS = sorted((DATA / "run").glob("*.json"))
INSPECTIONS = sorted((DATA / "inspect").glob("*.json"))
PLANS = sorted((DATA / "plan").glob("*.json"))
TUNES = sorted((DATA / "tune").glob("*.json"))
PLANNED = {"node": ("cpu_bound", "--cpus", "96", "--ranks-per-node", "8", "--step-ms", "120", "--batch-size", "256",
                    "--ram", "200GB", "--shm", "64GB"),
           "runner": ("io_bound", "--cpus", "4", "--ram", "1GB", "--step-ms", "20"),
           "one_cpu": ("model_bound", "--cpus", "1")}
"""How each recorded plan was made: the sweep in tests/data/sweep, then ``dataprof plan``'s options."""
COMPARED = [(DATA / "sweep" / "latency.json", DATA / "sweep" / "io_bound.json"),
            (DATA / "sweep" / "io_bound.json", DATA / "sweep" / "cpu_bound.json"),
            (DATA / "run" / "train_w0.json", DATA / "run" / "train_w2.json")]


def golden(name: str, text: str) -> None:
    """``text`` is what ``GOLDEN / name`` holds (written there instead with DATAPROF_UPDATE_GOLDEN=1)."""
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: DATAPROF_UPDATE_GOLDEN=1 writes it"
    assert text == path.read_text()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=ENV, prog_name="dataprof")
    return result.exit_code, result.stdout


def name_of(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def plain_html(text: str) -> str:
    """The page without what plotly writes (its bundle, each chart's figure and random div ids) and without
    its style sheet: our words."""
    text = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", r"<\1/>", text, flags=re.DOTALL)
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", text)


@pytest.mark.parametrize("path", SWEEPS + RUNS + INSPECTIONS + PLANS + TUNES, ids=name_of)
def test_diagnose_renders_and_writes_what_it_did(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    code, stdout = invoke("diagnose", str(path), "--json", str(out))
    assert code == 0
    golden(f"{name_of(path)}.diagnose.txt", stdout)
    golden(f"{name_of(path)}.diagnose.json", out.read_text())


@pytest.mark.parametrize("path", RUNS + INSPECTIONS + PLANS + TUNES, ids=name_of)
def test_report_writes_the_page_it_did(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    assert invoke("report", str(path), "--html", str(out))[0] == 0
    golden(f"{name_of(path)}.report.html", plain_html(out.read_text()))


@pytest.mark.slow  # plotly builds four charts per page: a fifth of a second each
@pytest.mark.parametrize("path", SWEEPS, ids=name_of)
def test_report_writes_the_sweep_page_it_did(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    assert invoke("report", str(path), "--html", str(out))[0] == 0
    golden(f"{name_of(path)}.report.html", plain_html(out.read_text()))


@pytest.mark.parametrize(("old", "new"), COMPARED, ids=lambda path: name_of(path))
def test_compare_renders_what_it_did(old: Path, new: Path) -> None:
    code, stdout = invoke("compare", str(old), str(new))
    golden(f"compare/{old.parent.name}-{old.stem}--{new.stem}.txt", f"exit code {code}\n{stdout}")


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_plan_renders_and_writes_what_it_did(name: str, tmp_path: Path) -> None:
    sweep, *options = PLANNED[name]
    out = tmp_path / "plan.json"
    code, stdout = invoke("plan", str(DATA / "sweep" / f"{sweep}.json"), *options, "--json", str(out))
    assert code == 0
    golden(f"plan/{name}.plan.txt", stdout)
    assert out.read_text() == (DATA / "plan" / f"{name}.json").read_text()  # the recorded plan is this one


def commands() -> list[tuple[str, ...]]:
    assert isinstance(main, click.Group)
    return [(), *((name,) for name in sorted(main.commands))]


@pytest.mark.parametrize("command", commands(), ids=lambda command: " ".join(command) or "dataprof")
def test_help_says_what_it_did(command: tuple[str, ...]) -> None:
    code, stdout = invoke(*command, "--help")
    assert code == 0
    golden(f"help/{'-'.join(command) or 'dataprof'}.txt", stdout)

"""``dataprof tune``: the training itself as the trial, end to end on a short training script."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT

SCRIPT = "tests/fixtures/train_script.py"
TRIAL = "tests/fixtures/trial_script.py"
START_S = 2.5
"""The seconds to start a process that imports torch and dataprof's watch that these tests' budgets allow for:
where it takes longer (a slower machine, a CUDA build's libraries loaded), they grow in proportion, so that each
still holds the runs its test needs."""


@functools.cache
def start_s() -> float:
    """Seconds a process takes here to start and import torch and dataprof's watch, as each of tune's runs does."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, dataprof.measure.watch.watched"], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return time.perf_counter() - start


def budget(seconds: float) -> str:
    """``--budget`` for as many runs as ``seconds`` holds where a run starts in :data:`START_S`."""
    return str(round(seconds * max(1.0, start_s() / START_S)))


def dataprof_tune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dataprof", "tune", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120"))


@pytest.mark.slow
def test_a_latency_bound_training_is_tuned_in_itself_and_told_what_data_costs_it(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    done = dataprof_tune("--budget", budget(50), "--trial-seconds", "1.5", "--max-data-cost", "10%", "--json", str(out),
                         SCRIPT, "--epochs", "50", "--length", "256", "--workers", "1", "--sleep-ms", "2",
                         "--step-ms", "5", "--factory")
    assert done.returncode == 1, done.stderr  # the gate: data loading costs this training far more than 10%
    assert "gate failed: data loading costs your training" in done.stderr
    doc = json.loads(out.read_text())
    line = next(n for n, text in enumerate((ROOT / SCRIPT).read_text().splitlines(), 1) if "return DataLoader(" in text)
    assert doc["kind"] == "tune" and doc["loader"]["site"] == f"{SCRIPT}:{line}"
    assert doc["loader"]["settings"]["num_workers"] == 1 and doc["loader"]["batch_size"] == 8
    roles = [t["role"] for t in doc["trials"]]
    assert roles[:3] == ["current", "headspace", "sweep"] and roles[3:4] in ([], ["current"])  # a busy machine's
    # loader sweep may leave the budget no fourth run; one that is left is yours again, before any other config
    # the loader alone, swept through make_loader at the training's free-data step, then run in the training
    swept = doc["loader_sweep"]
    assert swept["target"] == f"{SCRIPT}:make_loader" and swept["args"] == {"workers": 1}
    assert swept["config"]["num_workers"] >= 2 and swept["rank_in_training"][1] >= 2
    assert "the loader alone (dataprof sweep" in done.stdout
    # 2 ms × 8 samples a batch on one worker against a 5 ms step: more workers feed it, up to the step's pace
    assert doc["headspace"]["iterations_per_s"] > doc["current"]["iterations_per_s"]
    more = [t for t in doc["trials"] if t["status"] == "ok" and (t["config"].get("num_workers") or 1) >= 2]
    assert more and min(t["iterations_per_s"] for t in more) > doc["current"]["iterations_per_s"]
    if doc["recommended"] is None:  # beside another test's processes, the runs could not order the configs that
        # feed it: tune says so, of configs with more workers, never of yours
        assert doc["verdict"] == "cannot_tell" and not doc["reason"].startswith("cannot tell on this machine: yours")
        return
    assert doc["recommended"]["config"]["num_workers"] >= 2 and doc["recommended"]["gain_over_current"] > 0.3
    assert doc["data_cost_fraction"] > doc["recommended_data_cost_fraction"] >= 0
    assert f"at {SCRIPT}:{line} (DataLoader): num_workers=1 → " in done.stdout


@pytest.mark.slow
def test_when_every_config_with_workers_fails_for_one_cause_nothing_is_recommended_and_the_cause_is_named(
        tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    done = dataprof_tune("--budget", budget(40), "--trial-seconds", "1", "--no-loader-sweep", "--json", str(out),
                         SCRIPT, "--epochs", "50", "--length", "64", "--worker-error",
                         "unable to write to file </torch_812_0>: No space left on device (28)")
    assert done.returncode == 4, done.stderr
    doc = json.loads(out.read_text())
    assert doc["recommended"] is None and doc["current"] is not None and doc["data_cost_fraction"] is not None
    assert "no config other than yours completed" in doc["reason"] and "/dev/shm is too small" in doc["reason"]
    failed = [t for t in doc["trials"] if t["status"] == "failed"]
    assert failed and all("No space left on device" in t["error"] for t in failed)
    assert any("No space left on device" in line for line in failed[0]["stderr_tail"])
    assert "no answer: no config other than yours completed" in done.stdout and "  | " in done.stdout


@pytest.mark.slow
def test_a_slow_step_gets_a_headspace_timed_on_replayed_batches_not_the_loader_s_figure(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    # 8 samples × 25 ms to load, then a 400 ms step: 0.6 s an iteration as it is, 0.4 s with data for free; 16
    # batches kept would take 9.6 s, past the 3 s window, and the headspace would time the loader
    done = dataprof_tune("--budget", "1", "--trial-seconds", "3", "--no-loader-sweep", "--json", str(out), SCRIPT,
                         "--epochs", "50", "--length", "64", "--sleep-ms", "25", "--step-ms", "400")
    assert done.returncode == 4, done.stderr  # nothing but yours and the headspace within the budget
    doc = json.loads(out.read_text())
    headspace = doc["trials"][1]
    assert headspace["role"] == "headspace" and headspace["status"] == "ok", headspace["error"]
    assert doc["headspace"]["iterations_per_s"] > 1.3 * doc["current"]["iterations_per_s"]
    assert "its first 2 batches replayed" in done.stderr


@pytest.mark.slow
def test_under_workdir_each_run_writes_in_its_own_directory_told_it_is_a_trial(tmp_path: Path) -> None:
    work = tmp_path / "runs"
    done = dataprof_tune("--budget", budget(20), "--trial-seconds", "1", "--no-loader-sweep", "--workdir", str(work),
                         TRIAL, "--checkpoint", "ckpt.pt", "--record", "seen.jsonl", "--output-dir", "out")
    assert done.returncode in (0, 4), done.stderr
    assert "the script runs several times" in done.stderr and "DATAPROF_TRIAL=1" in done.stderr
    runs = sorted(work.iterdir(), key=lambda path: int(path.name.split("-")[1]))
    assert [path.name for path in runs[:3]] == ["run-1", "run-2", "run-3"]
    assert all((run / "ckpt.pt").exists() and (run / "out").is_dir() for run in runs)
    seen = [json.loads((run / "seen.jsonl").read_text()) for run in runs]
    assert [s["DATAPROF_TRIAL_ROLE"] for s in seen[:3]] == ["current", "headspace", "current"]
    assert all(s["DATAPROF_TRIAL"] == "1" for s in seen) and [s["DATAPROF_TRIAL_INDEX"] for s in seen[:2]] == ["1", "2"]
    assert not (ROOT / "ckpt.pt").exists() and not (ROOT / "out").exists() and not (ROOT / "seen.jsonl").exists()


@pytest.mark.slow
def test_a_script_that_refuses_to_write_over_its_first_run_s_output_is_named_with_workdir(tmp_path: Path) -> None:
    done = dataprof_tune("--budget", "5", "--trial-seconds", "1", "--no-loader-sweep", "--json",
                         str(tmp_path / "t.json"), TRIAL, "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 4, done.stderr  # every run after the first fails on the out/ the first made
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["recommended"] is None and "refuses to write over what an earlier run wrote" in doc["reason"]
    assert "--workdir DIR" in doc["reason"] and "FileExistsError" in doc["trials"][1]["error"]


@pytest.mark.slow
def test_a_run_that_does_not_end_after_its_window_is_ended_and_failed(tmp_path: Path) -> None:
    marker = str(tmp_path / "seen.jsonl")  # this test's script, among the other tests'
    done = dataprof_tune("--budget", "1", "--trial-seconds", "1", "--no-loader-sweep", TRIAL, "--linger",
                         "--record", marker)
    assert done.returncode == 3 and "did not exit 10 s after its last batch: ended by SIGINT" in done.stderr
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]


@pytest.mark.slow
def test_more_workers_over_a_stream_that_is_not_sharded_are_not_recommended(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    # 32 samples an epoch at 5 ms each, a 1 ms step: more workers look faster, and each yields the whole stream
    done = dataprof_tune("--budget", budget(35), "--trial-seconds", "1.5", "--no-loader-sweep", "--json", str(out),
                         SCRIPT, "--epochs", "400", "--length", "32", "--sleep-ms", "5", "--step-ms", "1", "--stream")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["loader"]["iterable"] is True and doc["recommended"]["config"] == {}
    multi = [t for t in doc["trials"] if t["status"] == "ok" and t["config"].get("num_workers", 0) >= 2]
    assert multi and all(t["epoch_samples"] == 32 * t["config"]["num_workers"] for t in multi)
    assert "an epoch of the stream held" in doc["reason"] and "get_worker_info()" in doc["reason"]


@pytest.mark.slow
def test_a_missing_script_and_one_without_a_loader_are_one_line(tmp_path: Path) -> None:
    missing = dataprof_tune("nowhere.py")
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1 and "nowhere.py" in missing.stderr
    script = tmp_path / "no_loader.py"
    script.write_text("print('training without a DataLoader')\n")
    empty = dataprof_tune("--trial-seconds", "2", str(script))
    assert empty.returncode == 3 and "the script iterated no DataLoader" in empty.stderr


@pytest.mark.slow
def test_a_data_parallel_training_is_tuned_as_its_ranks_at_its_slowest_rank_s_pace(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    before = set(Path(tempfile.gettempdir()).glob("dataprof-run-*"))
    done = dataprof_tune("--nproc-per-node", "2", "--budget", "1", "--trial-steps", "40", "--json", str(out),
                         "examples/ddp_train.py", "--slow-rank", "1")
    assert done.returncode == 4, done.stderr  # the budget ran out before another config ran: nothing compared
    assert "nothing to compare, nothing recommended" in done.stderr
    doc = json.loads(out.read_text())
    assert doc["nproc_per_node"] == 2 and "each run is one job of 2 rank(s) on this machine" in done.stdout
    assert doc["recommended"] is None and "budget" in doc["reason"]
    ran = doc["trials"]
    assert [t["role"] for t in ran] == ["current", "headspace"]  # these two whatever the budget, no more
    for trial in ran:
        assert [r["rank"] for r in trial["ranks"]] == [0, 1]
        assert trial["iterations_per_s"] == min(r["iterations_per_s"] for r in trial["ranks"])
        assert trial["data_wait_fraction"] == max(r["data_wait_fraction"] for r in trial["ranks"])
    current = ran[0]["ranks"]
    assert current[1]["data_wait_fraction"] > current[0]["data_wait_fraction"]  # rank 1 loads twice as slowly
    assert doc["headspace"]["iterations_per_s"] > 2 * doc["current"]["iterations_per_s"]
    assert set(Path(tempfile.gettempdir()).glob("dataprof-run-*")) == before


@pytest.mark.slow
def test_a_rank_that_fails_ends_the_other_ranks_at_once_not_at_their_collective_s_timeout() -> None:
    started = time.monotonic()
    done = dataprof_tune("--nproc-per-node", "2", "--budget", "1", "--trial-seconds", "2", "--no-loader-sweep",
                         "tests/fixtures/ddp_fail_script.py")
    assert done.returncode == 3, done.stderr
    assert "the script as it is failed: rank 1: the script exited with code 1: RuntimeError: rank 1 fails before " \
        "it joins" in done.stderr
    assert time.monotonic() - started < 120  # gloo's own timeout is 30 minutes


@pytest.mark.slow
@pytest.mark.skip(reason="exited 0, not 130, once under CI load (the SIGINT lost in the sweep's own handling, not "
                         "yet found): passes alone and in the cli files beside each other")
def test_ctrl_c_in_the_loader_only_sweep_keeps_the_runs_measured(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "tune.json"
    proc = subprocess.Popen([sys.executable, "-m", "dataprof", "tune", "--trial-seconds", "1", "--json", str(out),
                             SCRIPT, "--epochs", "50", "--length", "128", "--factory"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stderr is not None
    for line in proc.stderr:
        if "the loader alone: sweeping" in line:
            time.sleep(1.0)  # inside the sweep's first trial
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and [t["role"] for t in doc["trials"]] == ["current", "headspace"]


def test_tune_under_torchrun_is_one_line_saying_it_starts_the_ranks_itself() -> None:
    from click.testing import CliRunner

    from dataprof.cli import main

    done = CliRunner().invoke(main, ["tune", SCRIPT], env={"RANK": "0", "WORLD_SIZE": "2"})
    assert done.exit_code == 2 and done.output.count("\n") == 1
    assert "run it outside torchrun, with --nproc-per-node" in done.output


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_script_that_trains_in_a_process_of_its_own_stops_tune_within_seconds_in_one_line(method: str) -> None:
    started = time.monotonic()
    done = dataprof_tune("--budget", "1", "--no-loader-sweep", TRIAL, "--epochs", "1000", "--in-process", method)
    assert done.returncode == 2 and time.monotonic() - started < 60, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: {TRIAL} starts ranks of its own (a multiprocessing.Process of its own iterating a loader at ")
    assert "Traceback" not in done.stderr

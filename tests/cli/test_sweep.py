"""Real sweeps on tiny datasets: the runner, faults, the CLI and its exit codes.

Each test starts real processes (host, trials, DataLoader workers); figures are
checked for consistency, never against a stopwatch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from dataprof.cli import main
from tests.conftest import DATA, Invoke, ours, shm_left, shm_names


def leftover_processes() -> list[psutil.Process]:
    """Any host, trial or worker process still alive (they all run dataprof.measure.sweep.host)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if any("dataprof.measure.sweep.host" in part for part in cmdline) and proc.info["status"] != "zombie" \
                and ours(proc):
            found.append(proc)
    return found


@pytest.mark.slow
def test_sweep_measures_every_config_and_writes_json(tmp_path: Path, cli: Invoke, datasets: str,
                                                     quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:Sleepy", "--arg", "sleep_ms=2", "--batch-size", "8",
                               "--workers", "1,2", *quick, "--json", str(out))
    assert code == 0, stderr
    data = json.loads(out.read_text())
    configs = [(t["config"]["num_workers"], t["status"]) for t in data["trials"]]
    assert configs == [(0, "ok"), (1, "ok"), (2, "ok")]  # baseline added although not asked for
    for trial in data["trials"]:
        assert trial["samples"] == trial["batches"] * 8
        assert trial["samples_per_s"] == pytest.approx(trial["samples"] / trial["window_s"])
        assert 0 <= trial["wait_fraction"] <= 1
        assert trial["first_batch_s"] > 0 and trial["peak_memory_bytes"] > 0
        assert trial["gpu_util_percent"] is None
    assert data["best"]["config"]["num_workers"] >= 1
    assert data["environment"]["device"] == "cpu" and data["complete"] is True
    assert "DataLoader(dataset, batch_size=8, num_workers=" in stdout
    assert not leftover_processes()


@pytest.mark.slow
def test_iterable_dataset_and_factory_args(tmp_path: Path, cli: Invoke, datasets: str, quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:Stream", "--arg", "length=100000", "--workers", "0,2", *quick,
                          "--json", str(out))
    assert code == 0, stderr
    data = json.loads(out.read_text())
    assert data["dataset"]["kind"] == "iterable"
    assert all(t["status"] == "ok" for t in data["trials"])


@pytest.mark.slow
def test_step_ms_makes_the_model_the_bottleneck(tmp_path: Path, cli: Invoke, datasets: str, quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--arg", "length=100000", "--step-ms", "20", "--workers", "0",
                          "--batch-size", "4", *quick, "--json", str(out))
    assert code == 0, stderr
    trial = json.loads(out.read_text())["trials"][0]
    assert trial["step_ms_mean"] >= 20.0  # a sleep lasts at least as long as asked


@pytest.mark.parametrize("args,message", [
    (["--workers", "-1"], "--workers: -1 is below the minimum of 0"),
    (["--workers", "2,x"], "'x' is not an integer"),
    (["--prefetch-factor", "0"], "--prefetch-factor: 0 is below the minimum of 1"),
    (["--persistent-workers", "sometimes"], "is not on or off"),
    (["--memory-limit", "lots"], "is not a size"),
    (["--device", "tpu"], "expected auto, cpu, cuda or cuda:N"),
    (["--arg", "oops"], "expected KEY=VALUE"),
])
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str, cli: Invoke, datasets: str) -> None:
    code, stdout, stderr = cli("sweep", f"{datasets}:Tiny", *args)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr + stdout


@pytest.mark.slow
@pytest.mark.parametrize("attr,message", [
    ("Missing", "has no attribute 'Missing'"),
    ("BadInit", "raised FileNotFoundError: no such directory"),
    ("Empty", "the dataset is empty"),
    ("Ragged", "cannot be batched"),
    ("RaisesAt", "dataset[37] raised ValueError: corrupt record 37"),
    ("NOT_A_DATASET", "not a Dataset"),
])
def test_target_errors_exit_3_with_one_line(attr: str, message: str, cli: Invoke, datasets: str,
                                            quick: list[str]) -> None:
    code, stdout, stderr = cli("sweep", f"{datasets}:{attr}", "--workers", "0,2", *quick)
    assert code == 3, stderr
    assert message in stderr
    assert "Traceback" not in stderr + stdout
    assert not leftover_processes()


@pytest.mark.slow
def test_error_past_the_first_batch_is_a_target_error_found_once(tmp_path: Path, cli: Invoke, datasets: str,
                                                                 quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:RaisesAt", "--arg", "bad_index=300", "--batch-size", "8",
                          "--workers", "0,2,4", *quick, "--json", str(out))
    assert code == 3
    assert "dataset[300] raised ValueError: corrupt record 300" in stderr
    assert len(json.loads(out.read_text())["trials"]) == 1



@pytest.mark.parametrize("command", [["sweep", "{datasets}:Tiny"], ["inspect", "{datasets}:Tiny"],
                                     ["run", "train.py"], ["tune", "train.py"]])
def test_an_output_file_that_cannot_be_written_is_refused_before_anything_is_measured(
        command: list[str], tmp_path: Path, cli: Invoke, datasets: str) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file where the folder would be")
    args = [arg.format(datasets=datasets) for arg in command]
    code, stdout, stderr = cli(args[0], "--json", str(blocker / "out.json"), *args[1:])
    assert code == 2 and f"{blocker / 'out.json'}: {blocker} is not a folder" in stderr
    assert "Traceback" not in stderr + stdout and "loading" not in stderr and "inspecting" not in stderr


@pytest.mark.slow
def test_a_document_that_cannot_be_saved_in_the_middle_leaves_the_sweep_to_go_on_and_say_so(
        tmp_path: Path, cli: Invoke, datasets: str, quick: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprof.cli import output

    writes: list[str] = []

    def full_disk(path: Path, text: str) -> None:
        writes.append(text)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "_write_atomic", full_disk)
    out = tmp_path / "out.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:Tiny", "--batch-size", "4", "--workers", "0,2", *quick,
                               "--json", str(out))
    assert code == 2 and stderr.count(f"warning: cannot write {out}: No space left on device; the sweep goes on") == 1
    assert stderr.rstrip().endswith(f"error: cannot write {out}: No space left on device")
    assert "Recommended" in stdout and len(writes) >= 3  # each trial's, then the end's
    assert "Traceback" not in stderr + stdout

@pytest.mark.slow
def test_debug_shows_the_traceback(cli: Invoke, datasets: str) -> None:
    code, _, stderr = cli("sweep", f"{datasets}:BadInit", "--debug")
    assert code == 3 and "Traceback" in stderr


@pytest.mark.slow
def test_worker_faults_mark_the_trial_and_the_sweep_goes_on(tmp_path: Path, cli: Invoke, datasets: str,
                                                            quick: list[str]) -> None:
    for attr, status, words, told in [
            ("SegfaultInWorker", "crashed", "died by SIGSEGV", "a segmentation fault in native code"),
            ("BusErrorInWorker", "crashed", "died by SIGBUS", "a bus error in a worker usually means /dev/shm is too "
                                                              "small"),
            ("HangInWorker", "timeout", "no batch for 3 s", "")]:
        out = tmp_path / f"{attr}.json"
        code, stdout, stderr = cli("sweep", f"{datasets}:{attr}", "--batch-size", "4", "--workers", "0,2", *quick,
                                   "--trial-timeout", "3", "--json", str(out))
        assert code == 0, stderr
        trials = json.loads(out.read_text())["trials"]
        assert trials[0]["status"] == "ok"
        assert trials[1]["status"] == status and words in trials[1]["error"], trials[1]
        if told:  # the document says what died by what; the reader is told what that usually means
            assert told not in trials[1]["error"] and f"{words}: {told}" in " ".join(stdout.split()), stdout
        assert not leftover_processes()


@pytest.mark.slow
def test_a_worker_that_dies_on_its_way_out_after_the_window_leaves_the_trial_measured(
        tmp_path: Path, cli: Invoke, datasets: str, quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:WorkerAbortsAtExit", "--batch-size", "4", "--workers", "0,2",
                          "--start-method", "spawn", *quick, "--json", str(out))
    assert code == 0, stderr
    trials = json.loads(out.read_text())["trials"]
    spawned = [t for t in trials if t["config"]["multiprocessing_context"] == "spawn"]
    assert spawned and all(t["status"] == "ok" and t["samples_per_s"] for t in spawned), spawned
    assert not leftover_processes()


@pytest.mark.slow
def test_memory_limit_kills_a_leaking_trial(tmp_path: Path, cli: Invoke, datasets: str) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:LeakInWorker", "--batch-size", "4", "--workers", "0,2",
                          "--trial-seconds", "5", "--memory-limit", "700MB", "--json", str(out))
    assert code == 0, stderr
    trials = json.loads(out.read_text())["trials"]
    assert trials[1]["status"] == "oom" and "memory limit" in trials[1]["error"]
    assert not leftover_processes()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stopped_sweep_keeps_partial_results_and_leaves_nothing_behind(tmp_path: Path, datasets: str,
                                                                         stop: signal.Signals) -> None:
    """Ctrl-C, SIGTERM (a job's time limit) and SIGKILL mid-trial: the trials measured are kept; no process, no
    shared memory and none of dataprof's temporary files are left (killed, the sweep's host removes them)."""
    out = tmp_path / "run.json"
    shm_before = shm_names()
    temp_before = set(Path(tempfile.gettempdir()).glob("dataprof-*"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataprof", "sweep", f"{datasets}:Sleepy", "--batch-size", "4", "--workers", "0,1,2,3",
         "--trial-seconds", "2", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal starts it, even when
    deadline = time.monotonic() + 60  # this suite runs in the background, whose SIGINT a child inherits ignored
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # into the next trial, whose files exist now
    proc.send_signal(stop)
    stdout, stderr = proc.communicate(timeout=30)
    data = json.loads(out.read_text())
    assert data["complete"] is False and len(data["trials"]) >= 1
    if stop == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "Partial result" in stdout
    deadline = time.monotonic() + 10  # killed, the sweep leaves its host to end the trial and remove its files
    while (leftover_processes() or set(Path(tempfile.gettempdir()).glob("dataprof-*")) - temp_before) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftover_processes()
    assert set(Path(tempfile.gettempdir()).glob("dataprof-*")) <= temp_before
    assert not shm_left(shm_before)  # no shared-memory files left behind


def test_diagnose_rerenders_a_saved_run(tmp_path: Path) -> None:
    # Recorded before the diagnosis existed: its "diagnosis" block is empty, and diagnose fills it.
    recorded = DATA / "sweep" / "latency.json"
    assert json.loads(recorded.read_text())["diagnosis"]["primary"] is None
    out = tmp_path / "again.json"
    result = CliRunner().invoke(main, ["diagnose", str(recorded), "--json", str(out)])
    assert result.exit_code == 0
    assert "★ w4 pf2 persist" in result.stdout
    assert "Bottleneck: I/O-bound" in result.stdout
    assert result.stdout.index("Bottleneck:") < result.stdout.index("Trials (steady state")
    assert json.loads(out.read_text())["diagnosis"]["primary"] == "io_bound"


def test_diagnose_rejects_foreign_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"hello": 1}))
    result = CliRunner().invoke(main, ["diagnose", str(bad)])
    assert result.exit_code == 2 and "not a dataprof result" in result.stderr
    bad.write_text(json.dumps({"tool": {"name": "dataprof"}, "schema_version": 99}))
    result = CliRunner().invoke(main, ["diagnose", str(bad)])
    assert result.exit_code == 2 and "schema_version 99" in result.stderr


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "dataprof, version" in result.stdout


@pytest.mark.slow
def test_resume_skips_configs_already_measured(tmp_path: Path, cli: Invoke, datasets: str, quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--workers", "0,2", *quick, "--json", str(out))
    assert code == 0, stderr
    first = json.loads(out.read_text())["trials"]
    assert [t["config"]["num_workers"] for t in first][:2] == [0, 2]
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--workers", "0,2,3", "--strategy", "grid", *quick,
                          "--resume", str(out))
    assert code == 0, stderr
    trials = json.loads(out.read_text())["trials"]
    assert trials[:len(first)] == first  # kept as measured, not re-run
    assert [t["config"]["num_workers"] for t in trials[len(first):]] == [3]
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--batch-size", "8", *quick, "--resume", str(out))
    assert code == 2 and "the saved run used batch_size=64" in stderr


@pytest.mark.slow
def test_adaptive_search_explains_each_trial_and_measures_the_rules_of_thumb(tmp_path: Path, cli: Invoke, datasets: str,
                                                                             quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:Sleepy", "--arg", "sleep_ms=2", "--batch-size", "4",
                               "--workers", "1,2,4", *quick, "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    search = doc["search"]
    assert search["strategy"] == "adaptive" and search["trials_run"] == len(doc["trials"])
    # a close call the noise decided is measured again, and pooled into its config's row
    steps = [step for step in search["steps"] if not step["why"].startswith("re-measure")]
    assert [step["config"] for step in steps] == [t["config"] for t in doc["trials"]]
    whys = [step["why"] for step in steps]
    assert whys[0].startswith("baseline") and whys[1:3] == ["climb", "climb"]
    assert whys[3].startswith("climb: w0 → w2")
    assert "top of the worker range (w4)" in search["stopped"] or "not beyond" in search["stopped"]
    rules = {r["rule"]: r for r in doc["rules_of_thumb"]}
    assert set(rules) == {"0.75 × usable CPUs", "usable CPUs − 1"}
    assert all(r["status"] == "ok" and r["recommended_speedup"] for r in rules.values())
    assert "Search: adaptive" in stdout and "Against the rules of thumb" in stdout


@pytest.mark.slow
def test_stragglers_get_in_order_off_measured_and_recommended_with_the_order_caveat(tmp_path: Path, cli: Invoke,
                                                                                    datasets: str) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:EveryFourthBatchStalls", "--batch-size", "8", "--workers", "0,6",
                               "--trial-seconds", "2", "--prefetch-factor", "2", "--no-rules-of-thumb",
                               "--json", str(out))
    assert code == 0, stderr
    data = json.loads(out.read_text())
    by_config = {(t["config"]["num_workers"], t["config"]["in_order"]): t for t in data["trials"]}
    assert (6, False) in by_config and (6, None) in by_config  # tried on the stragglers' evidence, beside w6
    if data["best"]["config"]["in_order"] is False:  # faster here, as it is on any quiet machine
        assert "not in the sampler's order" in data["best"]["reason"] and "in_order=False" in stdout
    finding = next(f for f in data["diagnosis"]["findings"] if f["id"] == "stragglers")
    assert "in_order=False measured: w6 pf2 persist" in finding["evidence"]


@pytest.mark.slow
def test_a_start_method_is_measured_against_the_default(tmp_path: Path, cli: Invoke, datasets: str) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:BigInMemory", "--batch-size", "8", "--workers", "0,2", "--start-method",
                          "fork,spawn", "--trial-seconds", "1", "--prefetch-factor", "2", "--no-rules-of-thumb",
                          "--strategy", "grid", "--json", str(out))
    assert code == 0, stderr
    data = json.loads(out.read_text())
    assert data["settings"]["start_method"] == "fork" and data["settings"]["start_methods"] == ["fork", "spawn"]
    workers = {t["config"]["multiprocessing_context"]: t for t in data["trials"] if t["config"]["num_workers"] == 2}
    assert set(workers) == {None, "spawn"}  # fork is the default here: not passed, not measured twice
    fork, spawn = workers[None], workers["spawn"]
    assert fork["status"] == spawn["status"] == "ok"
    # spawn pickles the 200 MB dataset into each of the 2 workers; fork shares the parent's pages
    assert spawn["peak_memory_bytes"] > fork["peak_memory_bytes"] + 300 * 2**20

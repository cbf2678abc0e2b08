"""``dataprof run``: the script runs as python runs it, its loaders are timed, the verdict follows the bands."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from dataprof.decide.run import judge
from dataprof.measure.watch.watcher import EXIT_GRACE_S
from dataprof.results.run import RunReport
from tests.conftest import ROOT, ours, run_report

SCRIPT = "tests/fixtures/train_script.py"


def dataprof_run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dataprof", "run", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.slow
def test_the_script_sees_what_python_gives_it_and_the_same_batches(tmp_path: Path) -> None:
    plain, watched = tmp_path / "plain.json", tmp_path / "watched.json"
    common = ["--epochs", "2", "--workers", "2", "--length", "64"]
    subprocess.run([sys.executable, SCRIPT, *common, "--record", str(plain)], cwd=ROOT, check=True,
                   capture_output=True)
    done = dataprof_run("--json", str(tmp_path / "run.json"), SCRIPT, *common, "--record", str(watched))
    assert done.returncode == 0, done.stderr
    seen, expected = json.loads(watched.read_text()), json.loads(plain.read_text())
    assert seen["batches"] == expected["batches"] and seen["name"] == "__main__"
    assert seen["argv"] == [SCRIPT, *common, "--record", str(watched)]
    assert "trained on 16 batches" in done.stdout
    doc = json.loads((tmp_path / "run.json").read_text())
    loader = doc["loaders"][0]
    assert (loader["batches"], loader["epochs"], loader["num_workers"]) == (16, 2, 2)
    assert loader["start_method"] in multiprocessing.get_all_start_methods() and not loader["iterable"]
    line = next(n for n, text in enumerate((ROOT / SCRIPT).read_text().splitlines(), 1) if "= DataLoader(" in text)
    assert loader["site"] == f"{SCRIPT}:{line}" and len(loader["first_batch_s"]) == 2
    pytest.importorskip("torchdata.nodes")
    threaded = tmp_path / "threaded.json"
    done = dataprof_run("--override", "worker_kind=thread,num_workers=3", "--json", str(tmp_path / "threads.json"),
                        SCRIPT, *common, "--record", str(threaded))
    assert done.returncode == 0, done.stderr
    assert json.loads(threaded.read_text())["batches"] == expected["batches"]  # threads load the same batches
    loaders = json.loads((tmp_path / "threads.json").read_text())["loaders"]
    assert [loader["site"] for loader in loaders] == [f"{SCRIPT}:{line}"]  # not the pipeline dataprof built too
    loader = loaders[0]
    assert (loader["worker_kind"], loader["num_workers"], loader["batches"]) == ("thread", 3, 16)


@pytest.mark.slow
def test_the_script_starts_with_none_of_dataprof_s_objects_in_its_collector(tmp_path: Path) -> None:
    """Forked workers inherit the collector's books: where dataprof's objects sat in them, a training's workers ran
    full collections its workers run alone did not (benchmarks/run_overhead.py --pipeline jpeg: 0.69 of its pace)."""
    script, plain, watched = tmp_path / "books.py", tmp_path / "plain.json", tmp_path / "watched.json"
    script.write_text("import gc, json, sys\n"
                      "json.dump(len(gc.get_objects()), open(sys.argv[1], 'w'))\n")
    subprocess.run([sys.executable, str(script), str(plain)], check=True)
    done = dataprof_run(str(script), str(watched))
    assert done.returncode == 0, done.stderr
    assert json.loads(watched.read_text()) <= json.loads(plain.read_text())


@pytest.mark.slow
def test_the_scripts_exit_code_and_traceback_are_its_own() -> None:
    done = dataprof_run(SCRIPT, "--exit-code", "7")
    assert done.returncode == 7 and "exit code 7" in " ".join(done.stdout.split())
    raised = dataprof_run(SCRIPT, "--raise-at", "5")
    assert raised.returncode == 1
    assert "RuntimeError: the step failed at batch 5" in raised.stderr and "train_script.py" in raised.stderr
    assert "dataprof/measure" not in raised.stderr and "runpy" not in raised.stderr
    assert "DataLoaders" in raised.stdout  # what was measured is still reported
    killed = dataprof_run(SCRIPT, "--workers", "2", "--kill-at", "5")
    assert killed.returncode == 128 + 9 and "exit code 137" in " ".join(killed.stdout.split())


@pytest.mark.slow
def test_max_steps_stops_the_script_cleanly_with_no_worker_left(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = dataprof_run("--max-steps", "10", "--json", str(out), SCRIPT, "--workers", "2", "--epochs", "50")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["ended_by"] == "--max-steps 10 reached" and doc["loaders"][0]["batches"] == 10
    assert "trained on" not in done.stdout  # the script was stopped, not run to its end
    left = [p for p in psutil.process_iter(["cmdline"]) if SCRIPT in " ".join(p.info["cmdline"] or []) and ours(p)]
    assert left == []


@pytest.mark.slow
def test_a_missing_script_or_module_is_one_line_and_exit_3() -> None:
    for args in (["no_such_script.py"], ["-m", "no_such_module_xyz"]):
        done = dataprof_run(*args)
        assert done.returncode == 3 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("by", ["Ctrl-C", "SIGTERM"])
def test_a_stopped_run_keeps_the_partial_report_and_exits_130(tmp_path: Path, by: str) -> None:
    """Ctrl-C reaches the script and dataprof (the terminal's process group); SIGTERM (a job's time limit)
    reaches dataprof alone, which passes it on to the script."""
    import signal
    import time

    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "dataprof", "run", "--json", str(out), SCRIPT, "--workers", "2",
                             "--epochs", "1000"], cwd=ROOT, start_new_session=True, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while len(psutil.Process(proc.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the script and its two workers: batches are flowing
    time.sleep(1.0)
    stopped = time.monotonic()
    if by == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert time.monotonic() - stopped < EXIT_GRACE_S  # the script ended when told, not killed after the grace
    assert proc.returncode == 130
    doc = json.loads(out.read_text())
    assert doc["ended_by"] == by and doc["complete"] is False and doc["loaders"][0]["batches"] > 0
    assert "Partial result" in stdout


@pytest.mark.slow
def test_a_killed_watch_takes_its_script_with_it(tmp_path: Path) -> None:
    """dataprof killed outright (the OOM killer, a launcher stopping a rank): the script it watched does not go
    on unwatched, for instance blocked in an all-reduce with ranks that have gone."""
    import signal

    script = tmp_path / "blocked.py"
    script.write_text("import time\nprint('waiting for the other ranks', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "dataprof", "run", str(script)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout is not None and "waiting" in proc.stdout.readline()
    (watched,) = psutil.Process(proc.pid).children()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    gone, _ = psutil.wait_procs([watched], timeout=10)
    assert gone == [watched]


@pytest.mark.slow
def test_gates_on_a_watched_run_exit_1_naming_the_gate(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    failed = dataprof_run("--max-data-wait", "1%", "--json", str(out), SCRIPT)
    assert failed.returncode == 1 and "gate failed: max_data_wait" in failed.stderr
    assert json.loads(out.read_text())["gates"][0]["passed"] is False  # the report is still written
    passed = dataprof_run("--max-data-wait", "99%", "--baseline", str(out), "--max-regression", "50%", SCRIPT)
    assert passed.returncode == 0, passed.stderr


@pytest.mark.slow
def test_under_torchrun_every_rank_is_watched_and_rank_0_reports(tmp_path: Path) -> None:
    """DDP ranks in lockstep, ended by time: every rank ends at the same batch, so none is left all-reducing with
    a rank that has gone (the training would fail where the watch ended it)."""
    out = tmp_path / "run.json"
    before = set(Path(tempfile.gettempdir()).glob("dataprof-run-*"))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "dataprof", "run", "--seconds", "5", "--json", str(out),
                           "examples/ddp_train.py", "--slow-rank", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Verdict:") == 1 and "rank 1" in done.stdout
    ranks = json.loads(out.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and [r["exit_code"] for r in ranks] == [0, 0]
    assert ranks[1]["data_wait_fraction"] > ranks[0]["data_wait_fraction"]  # the slow rank waits, the other too
    assert set(Path(tempfile.gettempdir()).glob("dataprof-run-*")) == before  # where the ranks met: removed


@pytest.mark.slow
def test_a_paddle_dataloader_is_watched_too(tmp_path: Path) -> None:
    pytest.importorskip("paddle")
    out = tmp_path / "run.json"
    done = dataprof_run("--json", str(out), "tests/fixtures/paddle_train_script.py")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    loader = doc["loaders"][0]
    assert (loader["framework"], loader["batches"], loader["batch_size"]) == ("paddle", 8, 8)
    assert doc["environment"]["framework"] == "paddle" and loader["data_wait_fraction"] is not None


@pytest.mark.slow
def test_a_torchdata_nodes_loader_over_threads_is_watched_too(tmp_path: Path) -> None:
    pytest.importorskip("torchdata.nodes")
    out = tmp_path / "run.json"
    done = dataprof_run("--json", str(out), "tests/fixtures/nodes_train_script.py")
    assert done.returncode == 0, done.stderr
    (loader,) = json.loads(out.read_text())["loaders"]
    assert (loader["loader_class"], loader["dataset"], loader["worker_kind"]) == ("Loader", "Sleepy", "thread")
    assert (loader["num_workers"], loader["prefetch_factor"], loader["batch_size"]) == (4, 2, 16)
    assert (loader["batches"], loader["epochs"]) == (50, 2)  # 400 samples in batches of 16, twice
    assert "num_workers=4 threads" in done.stdout and "--worker-kind process,thread" in done.stdout


def _saved(tmp_path: Path, name: str, report: RunReport) -> Path:
    path = tmp_path / name
    path.write_text(report.to_json())
    return path


def test_compare_and_report_read_run_documents(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dataprof.cli import main

    old = _saved(tmp_path, "old.json", judge(run_report(0.3)))
    slower = judge(run_report(0.3))
    slower = dataclasses.replace(slower, loaders=(dataclasses.replace(slower.loaders[0], samples_per_s=600.0),))
    new = _saved(tmp_path, "new.json", slower)
    runner = CliRunner()
    regressed = runner.invoke(main, ["compare", str(old), str(new)])
    assert regressed.exit_code == 1 and "800.0 → 600.0" in regressed.output and "-25.0%" in regressed.output
    assert runner.invoke(main, ["compare", str(old), str(old)]).exit_code == 0
    sweep = ROOT / "tests" / "data" / "sweep" / "io_bound.json"
    mixed = runner.invoke(main, ["compare", str(old), str(sweep)])
    assert mixed.exit_code == 2 and "compare two of a kind" in mixed.output
    stale = dataclasses.replace(judge(run_report(0.02)), verdict=None, next_command=None)
    rejudged = runner.invoke(main, ["diagnose", str(_saved(tmp_path, "stale.json", stale))])
    assert rejudged.exit_code == 0 and "model-bound" in rejudged.output
    page = tmp_path / "run.html"
    assert runner.invoke(main, ["report", str(old), "--html", str(page)]).exit_code == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text and "train.py:40" in text


@pytest.mark.slow
@pytest.mark.parametrize("inline", [False, True])
def test_run_suggests_the_factory_only_when_it_returned_the_loader(tmp_path: Path, inline: bool) -> None:
    out = tmp_path / "run.json"
    done = dataprof_run("--json", str(out), "tests/fixtures/factory_script.py", "--length", "300",
                        *(["--inline"] if inline else []))
    assert done.returncode == 0, done.stderr
    command = json.loads(out.read_text())["next_command"]
    if inline:  # train_inline iterates its own loader: sweeping it would train, so the dataset is named
        assert command.startswith("dataprof sweep tests/fixtures/datasets.py:Sleepy --batch-size 8 ")
    else:
        assert command.startswith("dataprof sweep tests/fixtures/factory_script.py:make_loader --arg length=300 "
                                  "--step-ms ")


@pytest.mark.slow
def test_override_sets_the_knobs_where_the_script_builds_its_loader(tmp_path: Path) -> None:
    common = ["--epochs", "1", "--workers", "2", "--length", "64", "--sleep-ms", "0"]
    done = dataprof_run("--override", "num_workers=0", "--json", str(tmp_path / "run.json"), SCRIPT, *common)
    assert done.returncode == 0, done.stderr  # persistent_workers=True needs workers: left at its default
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["loaders"][0]["num_workers"] == 0 and doc["loaders"][0]["persistent_workers"] is False
    assert doc["changes"] == {"knobs": {"num_workers": 0}, "replay": None, "loader": None, "overridden": 1,
                              "split": None}
    assert "changed: num_workers=0 where every loader is built (1 built so)" in done.stdout
    elsewhere = dataprof_run("--override", "num_workers=1", "--loader", "other.py:3", "--json",
                             str(tmp_path / "none.json"), SCRIPT, *common, "--start-method", "spawn")
    unchanged = json.loads((tmp_path / "none.json").read_text())["loaders"][0]
    assert (unchanged["num_workers"], unchanged["start_method"]) == (2, "spawn")
    assert "changed: nothing: no loader was built at other.py:3" in elsewhere.stdout


@pytest.mark.slow
def test_replay_gives_the_training_its_first_batches_again_for_free(tmp_path: Path) -> None:
    record = tmp_path / "seen.json"
    common = ["--epochs", "2", "--length", "64", "--sleep-ms", "20", "--step-ms", "1", "--record", str(record)]
    done = dataprof_run("--replay", "2", "--json", str(tmp_path / "run.json"), SCRIPT, *common)
    assert done.returncode == 0, done.stderr
    seen = json.loads(record.read_text())["batches"]
    assert len(seen) == 16 and seen[:2] == [list(map(float, range(8))), list(map(float, range(8, 16)))]
    assert seen[2:8] == seen[:2] * 3 and seen[8:] == seen[:2] * 4  # every epoch as long as the loader's
    loader = json.loads((tmp_path / "run.json").read_text())["loaders"][0]
    assert loader["batches"] == 16
    assert (loader["data_wait_fraction"] or 0.0) < 0.2  # 8 × 20 ms a batch, loaded: replayed, next to nothing


@pytest.mark.slow
@pytest.mark.skip(reason="hung once in 3 full runs under CI load (a race between the thread's end and the main "
                         "thread's SIGINT, not yet found): passes alone and in the cli files beside each other")
def test_a_loop_fed_by_a_background_thread_ends_at_the_watch_s_limit(tmp_path: Path) -> None:
    """``BackgroundGenerator``: the loader is iterated in a thread, the training waits on its queue; the watch's
    end, raised in that thread, ends the training's loop too (else it waits for ever)."""
    out = tmp_path / "run.json"
    done = dataprof_run("--max-steps", "40", "--json", str(out), "tests/fixtures/trial_script.py",
                        "--prefetch-thread", "--workers", "1")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["ended_by"] == "--max-steps 40 reached" and doc["stopped"] is None


@pytest.mark.slow
def test_a_process_the_script_leaves_running_is_killed_and_named_its_loader_workers_are_not(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = dataprof_run("--max-steps", "40", "--json", str(out), "tests/fixtures/trial_script.py", "--orphan",
                        "--workers", "2")
    assert done.returncode == 0, done.stderr
    notes = " ".join(json.loads(out.read_text())["notes"])
    assert "killed what the script left running: pid" in notes and "time.sleep(3600)" in notes
    assert notes.count("pid ") == 1  # its two DataLoader workers, ended with it, are no news
    assert not [p for p in psutil.process_iter(["cmdline"]) if "time.sleep(3600)" in " ".join(p.info["cmdline"] or ())]

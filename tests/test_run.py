"""``dataprof run``: the script runs as python runs it, its loaders are timed, the verdict follows the bands."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import psutil
import pytest

from dataprof.decide.run import judge
from dataprof.measure.protocol import Message
from dataprof.measure.watch.watched import Recorder, WatchedIterator, patch_dataloader
from dataprof.results.environment import Environment
from dataprof.results.run import LoaderRun, RunReport, RunResources

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "tests/fixtures/train_script.py"


class Sink:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.sent.append(message)


class FakeLoader:
    """A DataLoader's protocol, as a torch one would be patched."""

    def __init__(self, batches: list[Any], batch_size: int = 2) -> None:
        self.batches, self.batch_size, self.num_workers, self.dataset = batches, batch_size, 0, object()

    def __iter__(self) -> Any:
        return iter(self.batches)


def test_a_watched_loader_yields_the_same_batches_and_records_each() -> None:
    sink = Sink()
    recorder = Recorder(sink, max_steps=None, seconds=None)  # type: ignore[arg-type]
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    batches = [[1, 2], [3, 4], [5, 6]]
    loader = module.DataLoader(batches)
    assert list(loader) == batches and list(loader) == batches  # two epochs, unchanged
    recorder.flush()
    rows = [row for m in sink.sent if m["ev"] == "batches" for row in m["rows"]]
    assert [(row[0], row[1]) for row in rows] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert sink.sent[0]["ev"] == "loader" and sink.sent[0]["site"].startswith("tests/test_run.py:")
    assert isinstance(iter(loader), WatchedIterator)


def test_max_steps_ends_the_loop_from_inside() -> None:
    recorder = Recorder(Sink(), max_steps=2, seconds=None)  # type: ignore[arg-type]
    module = types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))
    patch_dataloader(module, recorder)  # type: ignore[arg-type]
    taken = []
    with pytest.raises(BaseException, match="--max-steps 2"):
        for batch in module.DataLoader([[1], [2], [3], [4]]):
            taken.append(batch)
    assert taken == [[1], [2]]


def _report(wait: float, workers: int = 2, workers_cpu: float | None = 20.0, main_cpu: float = 30.0,
            module: str = "__main__", machine: float = 40.0) -> RunReport:
    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2.13", device="cpu")
    loader = LoaderRun(site="train.py:40", dataset="Images", dataset_module=module,
                       dataset_file="train.py" if module == "__main__" else "/site-packages/mypkg/data.py",
                       loader_class="DataLoader", framework="torch",
                       batch_size=32, num_workers=workers, prefetch_factor=2, persistent_workers=True,
                       pin_memory=False, batches=500, epochs=1, steady_batches=490, samples_per_s=800.0,
                       data_wait_fraction=wait, wait_ms={"p50": 10 * wait, "p95": 20 * wait, "mean": 10 * wait},
                       step_ms={"p50": 40.0, "p95": 45.0, "mean": 41.0}, first_batch_s=(0.8,))
    return RunReport(tool_version="0", command=("train.py", "--epochs", "1"), environment=env, loaders=(loader,),
                     resources=RunResources(cpu_percent=(workers_cpu or 0) + main_cpu, main_cpu_percent=main_cpu,
                                            workers_cpu_percent=workers_cpu, cpu_percent_system=machine),
                     wall_s=30.0, exit_code=0)


@pytest.mark.parametrize(("wait", "kwargs", "verdict", "severity"), [
    (0.02, {}, "model_bound", "info"),
    (0.10, {}, "io_bound", "warning"),
    (0.45, {"workers_cpu": 190.0}, "cpu_bound", "critical"),
    (0.30, {"main_cpu": 99.0}, "main_process_bound", "critical"),
    (0.60, {"workers": 0, "workers_cpu": None}, "main_process_loading", "critical"),
    (0.25, {"machine": 97.0}, "cpu_bound", "critical"),
])
def test_the_verdict_follows_the_bands_and_the_cpu_facts(wait: float, kwargs: dict[str, Any], verdict: str,
                                                         severity: str) -> None:
    judged = judge(_report(wait, **kwargs))
    assert judged.verdict is not None and (judged.verdict.id, judged.verdict.severity) == (verdict, severity)
    assert f"{wait:.0%}" in judged.verdict.evidence


def test_the_next_step_is_a_sweep_with_the_measured_step() -> None:
    assert judge(_report(0.3)).next_command == "dataprof sweep train.py:Images --batch-size 32 --step-ms 40.0"
    assert judge(_report(0.3, module="mypkg.data")).next_command.startswith("dataprof sweep mypkg.data:Images ")


def test_the_run_document_round_trips() -> None:
    report = judge(_report(0.3))
    data = json.loads(report.to_json())
    assert data["kind"] == "run" and data["loaders"][0]["data_wait_fraction"] == 0.3
    assert data["loaders"][0]["gpu_util_percent"] is None
    assert RunReport.from_dict(data) == report
    assert dataclasses.asdict(RunReport.from_dict(data).loaders[0]) == dataclasses.asdict(report.loaders[0])


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
    line = next(n for n, text in enumerate((ROOT / SCRIPT).read_text().splitlines(), 1) if "= DataLoader(" in text)
    assert loader["site"] == f"{SCRIPT}:{line}" and len(loader["first_batch_s"]) == 2


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
    left = [p for p in psutil.process_iter(["cmdline"]) if SCRIPT in " ".join(p.info["cmdline"] or [])]
    assert left == []


@pytest.mark.slow
def test_a_missing_script_or_module_is_one_line_and_exit_3() -> None:
    for args in (["no_such_script.py"], ["-m", "no_such_module_xyz"]):
        done = dataprof_run(*args)
        assert done.returncode == 3 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_the_partial_report_and_exits_130(tmp_path: Path) -> None:
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
    os.killpg(proc.pid, signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    doc = json.loads(out.read_text())
    assert doc["ended_by"] == "Ctrl-C" and doc["complete"] is False and doc["loaders"][0]["batches"] > 0
    assert "Partial result" in stdout


def test_run_gates_pass_and_fail_with_their_numbers() -> None:
    from dataprof.decide.gates import RunGates, evaluate_run

    report = judge(_report(0.3))
    results = {g.gate: g for g in evaluate_run(report, RunGates(max_data_wait=0.1, min_throughput=500.0,
                                                                min_gpu_util=50.0))}
    assert not results["max_data_wait"].passed and "30.0% > 10%" in results["max_data_wait"].message
    assert results["min_throughput"].passed
    assert not results["min_gpu_util"].passed and "not measured" in results["min_gpu_util"].message
    faster = dataclasses.replace(report, loaders=(dataclasses.replace(report.loaders[0], samples_per_s=1000.0),))
    regression = evaluate_run(report, RunGates(max_regression=0.1), baseline=faster)[0]
    assert not regression.passed and "−20.0%" in regression.message.replace("-", "−")
    assert evaluate_run(faster, RunGates(max_regression=0.1), baseline=report)[0].passed


def test_a_used_gpu_is_sampled_through_nvml_and_its_absence_said() -> None:
    from dataprof.measure.sampler import Sampler
    from dataprof.measure.watch import watcher

    class FakeProbe:
        def sample(self, now: float) -> None:
            return None

    sampler = Sampler(FakeProbe(), FakeProbe(), FakeProbe())
    opened = []
    original = watcher.NvmlProbe.open
    watcher.NvmlProbe.open = lambda uuid, pci: opened.append(uuid) or "probe"  # type: ignore[assignment,method-assign]
    try:
        collector = watcher.Collector(watcher.SamplerMarks(sampler))
        collector.handle({"ev": "device", "device": "cuda:0", "uuid": "abc", "pci_bus_id": None, "name": "H200"})
    finally:
        watcher.NvmlProbe.open = original  # type: ignore[method-assign]
    assert opened == ["abc"] and sampler.gpu_probe == "probe" and collector.outcome["device"] == "cuda:0"
    assert watcher._gpu_note(collector.outcome) == ()
    assert "no CUDA device" in watcher._gpu_note({})[0]


@pytest.mark.slow
def test_gates_on_a_watched_run_exit_1_naming_the_gate(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    failed = dataprof_run("--max-data-wait", "1%", "--json", str(out), SCRIPT)
    assert failed.returncode == 1 and "gate failed: max_data_wait" in failed.stderr
    assert json.loads(out.read_text())["gates"][0]["passed"] is False  # the report is still written
    passed = dataprof_run("--max-data-wait", "99%", "--baseline", str(out), "--max-regression", "50%", SCRIPT)
    assert passed.returncode == 0, passed.stderr


def test_short_epochs_whose_start_dominates_are_told_apart_from_a_fine_steady_state() -> None:
    report = _report(0.02)
    short = dataclasses.replace(report, loaders=(dataclasses.replace(report.loaders[0], warmup_wait_fraction=0.4),))
    verdict = judge(short).verdict
    assert verdict is not None and verdict.id == "epoch_start" and "40%" in verdict.evidence
    assert judge(report).verdict.id == "model_bound"  # type: ignore[union-attr]


@pytest.mark.slow
def test_watch_in_python_times_the_block_and_puts_the_dataloader_back(tmp_path: Path) -> None:
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT / 'tests' / 'fixtures')!r})
import dataprof
from torch.utils.data import DataLoader
from train_script import SleepySamples
loader = DataLoader(SleepySamples(96, 2.0), batch_size=8, num_workers=2)
with dataprof.watch() as w:
    seen = [batch[:, 0].tolist() for _ in range(2) for batch in loader if not time.sleep(0.004)]
plain = [batch[:, 0].tolist() for _ in range(2) for batch in loader]
print(json.dumps({{"doc": w.report.to_dict(), "same": seen == plain,
                   "restored": type(iter(loader)).__name__ != "WatchedIterator"}}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same"] and out["restored"]
    loader = out["doc"]["loaders"][0]
    assert (loader["batches"], loader["epochs"]) == (24, 2) and out["doc"]["verdict"]["id"] != "no_loader"
    assert out["doc"]["resources"]["workers_cpu_percent"] is not None  # sampled from outside, workers included


def test_rank_0_gathers_every_ranks_figures_and_names_a_missing_one(tmp_path: Path) -> None:
    from dataprof.distributed import gather_runs
    from dataprof.results.environment import RankInfo

    job = tmp_path / "job"
    slow = dataclasses.replace(_report(0.5), exit_code=0)
    assert gather_runs(slow, RankInfo(rank=1, world_size=3, host="b"), job) is None  # rank 1 only leaves it
    gathered = gather_runs(_report(0.1), RankInfo(rank=0, world_size=3, host="a"), job, timeout_s=0.05,
                           sleep=lambda s: None)
    assert gathered is not None and [(r.rank, r.host) for r in gathered.ranks] == [(0, "a"), (1, "b")]
    assert gathered.slowest_rank().rank == 1  # type: ignore[union-attr]
    assert "ranks 2 left no report" in gathered.notes[-1] and not job.exists()  # nothing left behind in /tmp


@pytest.mark.slow
def test_under_torchrun_every_rank_is_watched_and_rank_0_reports(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "dataprof", "run", "--json", str(out), SCRIPT, "--length", "64"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Verdict:") == 1 and "rank 1" in done.stdout
    ranks = json.loads(out.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["data_wait_fraction"] is not None for r in ranks)


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


def _saved(tmp_path: Path, name: str, report: RunReport) -> Path:
    path = tmp_path / name
    path.write_text(report.to_json())
    return path


def test_compare_and_report_read_run_documents(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dataprof.cli import main

    old = _saved(tmp_path, "old.json", judge(_report(0.3)))
    slower = judge(_report(0.3))
    slower = dataclasses.replace(slower, loaders=(dataclasses.replace(slower.loaders[0], samples_per_s=600.0),))
    new = _saved(tmp_path, "new.json", slower)
    runner = CliRunner()
    regressed = runner.invoke(main, ["compare", str(old), str(new)])
    assert regressed.exit_code == 1 and "800.0 → 600.0" in regressed.output and "-25.0%" in regressed.output
    assert runner.invoke(main, ["compare", str(old), str(old)]).exit_code == 0
    sweep = ROOT / "tests" / "data" / "sweep" / "io_bound.json"
    mixed = runner.invoke(main, ["compare", str(old), str(sweep)])
    assert mixed.exit_code == 2 and "compare two of a kind" in mixed.output
    stale = dataclasses.replace(judge(_report(0.02)), verdict=None, next_command=None)
    rejudged = runner.invoke(main, ["diagnose", str(_saved(tmp_path, "stale.json", stale))])
    assert rejudged.exit_code == 0 and "model-bound" in rejudged.output
    page = tmp_path / "run.html"
    assert runner.invoke(main, ["report", str(old), "--html", str(page)]).exit_code == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text and "train.py:40" in text


def test_the_gpu_timeline_slices_the_watch_and_draws_in_the_terminal() -> None:
    from dataprof.measure.probes import GpuSample
    from dataprof.measure.watch.watcher import gpu_timeline
    from dataprof.render.run import render

    samples = [GpuSample(t=float(t), util_percent=[100.0 if t >= 50 else 0.0], memory_used_bytes=1) for t in range(100)]
    timeline = gpu_timeline(samples, slices=4)
    assert timeline == (0.0, 0.0, 100.0, 100.0)
    report = judge(_report(0.3))
    shown = dataclasses.replace(report, resources=dataclasses.replace(report.resources, gpu_util_percent=50.0,
                                                                      gpu_timeline=timeline))
    assert "GPU utilisation over the watch (0–100%): ▁▁██ mean 50%" in render(shown)
    assert RunReport.from_dict(json.loads(shown.to_json())).resources.gpu_timeline == timeline
    assert "GPU utilisation over the watch" not in render(report)


def test_the_next_step_sweeps_the_factory_that_built_the_loader() -> None:
    report = _report(0.3)
    built = dataclasses.replace(report.loaders[0], factory="train.py:make_loader",
                                factory_args=("length=300", "root='/data/my set'"))
    judged = judge(dataclasses.replace(report, loaders=(built,)))
    assert judged.next_command is not None
    assert shlex.split(judged.next_command) == ["dataprof", "sweep", "train.py:make_loader", "--arg", "length=300",
                                                "--arg", "root='/data/my set'", "--step-ms", "40.0"]
    module = dataclasses.replace(built, factory="train.py:ImageNet", factory_args=(), factory_split="val")
    assert judge(dataclasses.replace(report, loaders=(module,))).next_command == \
        "dataprof sweep train.py:ImageNet --split val --step-ms 40.0"
    blocked = dataclasses.replace(built, factory_blocked="its argument cfg is a Config, which --arg cannot give")
    assert judge(dataclasses.replace(report, loaders=(blocked,))).next_command.startswith(
        "dataprof sweep train.py:Images --batch-size 32")


def make_frame(length: int = 256, cfg: Any = None, name: str = "x") -> Any:
    """A module-level function: its frame is what a DataLoader built in it would see."""
    return sys._getframe()


def test_a_module_level_function_is_a_factory_with_its_literal_arguments() -> None:
    from dataprof.measure.watch.factory import loader_factory, still_running

    found = loader_factory(make_frame(300, name="y"))
    assert found["factory"] == f"{os.path.relpath(__file__)}:make_frame"
    assert found["factory_args"] == ["length=300", "name='y'"] and found["factory_blocked"] is None
    blocked = loader_factory(make_frame(cfg=object()))
    assert blocked["factory_blocked"] == "its argument cfg is a object, which --arg cannot give"

    def nested() -> Any:
        return sys._getframe()

    assert loader_factory(nested())["factory"] is None
    assert still_running(sys._getframe()) and not still_running(make_frame())


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

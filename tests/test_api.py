"""The Python API: the same work as the command line, on objects or target strings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

import dataprof
from tests.conftest import ROOT


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
def test_python_api_on_a_target_string(datasets: str) -> None:
    report = dataprof.sweep(f"{datasets}:Tiny", batch_size=8, workers="0", trial_seconds=0.3, rules_of_thumb=False)
    assert report.best is not None and report.best.config.num_workers == 0


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


def test_tune_s_loader_sweep_is_offered_the_factory_and_a_ctrl_c_in_it_ends_the_tune() -> None:
    import dataclasses

    from dataprof.decide.sweep import decide
    from dataprof.results.load import load_as
    from dataprof.results.sweep import Report
    from dataprof.results.trial import Percentiles
    from dataprof.results.tune import TunedLoader, TuneReport, TuneTrial
    from dataprof.results.vocabulary import TrialStatus
    from dataprof.tuner import loader_sweep_of_factory
    from tests.conftest import DATA, run_report

    recorded = decide(load_as(DATA / "sweep" / "latency.json", Report))
    calls: list[tuple[str, dict[str, object]]] = []

    def fake_sweep(target: str, **options: object) -> Report:
        calls.append((target, options))
        return recorded if len(calls) == 1 else dataclasses.replace(recorded, complete=False)

    found = dataclasses.replace(run_report(0.3).loaders[0], factory="train.py:make_loader",
                                factory_args=("images=256",))
    head = TuneTrial({}, TrialStatus.OK, "headspace", iterations_per_s=20.0, step_ms=Percentiles(41.0, 50.0))
    report = TuneReport("0", ("train.py",), TunedLoader("train.py:40", "DataLoader", 32, {"num_workers": 2}), (), 1.0)
    swept = loader_sweep_of_factory(report, found, head, None, fake_sweep)
    assert calls[0][0] == "train.py:make_loader" and calls[0][1]["args"] == {"images": 256}
    assert calls[0][1]["step_ms"] == 41.0 and swept.complete and swept.loader_sweep is not None
    assert swept.loader_sweep.label == "w4 pf2 persist" and swept.loader_sweep.config == {
        "num_workers": 4, "prefetch_factor": 2, "persistent_workers": True, "pin_memory": False}
    stopped = loader_sweep_of_factory(report, found, head, None, fake_sweep)
    assert not stopped.complete and stopped.loader_sweep is not None and stopped.loader_sweep.error == "interrupted"
    inline = loader_sweep_of_factory(report, run_report(0.3).loaders[0], head, None, fake_sweep)
    assert len(calls) == 2 and "no loader-only sweep to compare" in inline.notes[-1]
    again = loader_sweep_of_factory(inline, run_report(0.3).loaders[0], head, None, fake_sweep)  # the 2nd headspace
    assert again.notes == inline.notes and len(calls) == 2


def test_a_start_method_the_script_chose_is_kept_unless_tune_is_told_to_try_fork() -> None:
    """``multiprocessing_context="spawn"`` for a library that is not fork-safe (h5py, LMDB, tokenizers, CUDA in
    the dataset): tune does not try fork on ten seconds of speed; the platform's default is still tried."""
    import dataclasses

    from dataprof.decide.tune import next_run
    from dataprof.results.tune import TuneReport, TuneTrial
    from dataprof.results.vocabulary import TrialStatus
    from dataprof.tuner import _tuned
    from tests.conftest import run_report

    base = run_report(0.3)
    spawned = dataclasses.replace(base.loaders[0], start_method="spawn", start_method_chosen=True)
    run = dataclasses.replace(base, loaders=(spawned,))
    trial = TuneTrial({}, TrialStatus.OK, "current", iterations_per_s=10.0)
    kept, _ = _tuned(TuneReport("0", ("train.py",), None, (trial,), 1.0), run, trial, "train.py", None)
    assert kept.loader is not None and kept.loader.start_methods == ()
    assert any("starts its workers by spawn, kept" in note and "--try-fork" in note for note in kept.notes)
    tried, _ = _tuned(TuneReport("0", ("train.py",), None, (trial,), 1.0), run, trial, "train.py", None, True)
    assert tried.loader is not None and "fork" in tried.loader.start_methods
    default = dataclasses.replace(run, loaders=(dataclasses.replace(spawned, start_method_chosen=False),))
    offered, _ = _tuned(TuneReport("0", ("train.py",), None, (trial,), 1.0), default, trial, "train.py", None)
    assert offered.loader is not None and "fork" in offered.loader.start_methods
    runs = (trial, TuneTrial({}, TrialStatus.OK, "headspace", iterations_per_s=40.0), trial,
            TuneTrial({}, TrialStatus.OK, "headspace", iterations_per_s=40.0),
            TuneTrial({"num_workers": 4}, TrialStatus.OK, "candidate", iterations_per_s=9.0),
            TuneTrial({"num_workers": 1}, TrialStatus.OK, "candidate", iterations_per_s=8.0),
            TuneTrial({"prefetch_factor": 4}, TrialStatus.OK, "candidate", iterations_per_s=9.9))
    from dataprof.decide.tune import decide_tune

    asked = [next_run(decide_tune(dataclasses.replace(done, trials=runs))) for done in (kept, tried)]
    assert asked[0] is None or "multiprocessing_context" not in asked[0][0]
    assert asked[1] is not None and asked[1][0].get("multiprocessing_context") == "fork"

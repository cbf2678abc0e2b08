"""Loaders built by the frameworks people train with, watched and tuned where the user's code builds them:
the site is the user's line, the training's loader is the one tuned, and the script's own files stay apart."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "frameworks"


def line_of(script: Path, text: str) -> int:
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def dataprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dataprof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160"))


FRAMEWORKS = [  # the script, what it needs, its loaders' lines, its options, who builds its loaders (the split said)
    ("imagenet_train.py", None, ("train_loader = DataLoader(", "val_loader = DataLoader("), ("-j", "1"), None),
    ("lightning_train.py", "lightning", ("return DataLoader(self.train_set", "return DataLoader(self.val_set"),
     ("--workers", "1"), ""),
    ("hf_train.py", "transformers", ("trainer.train()", "trainer.train()"), ("--workers", "1"),
     "transformers.trainer:Trainer."),
    ("timm_train.py", "timm", ("loader_train = create_loader(", "loader_eval = create_loader("),
     ("--workers", "1"), "timm.data.loader:create_loader"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "package", "lines", "args", "builder"), FRAMEWORKS,
                         ids=[f[0] for f in FRAMEWORKS])
def test_a_framework_s_loaders_are_sited_at_the_user_s_line_with_their_split(
        tmp_path: Path, script: str, package: str | None, lines: tuple[str, str], args: tuple[str, ...],
        builder: str | None) -> None:
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    path = EXAMPLES / script
    done = dataprof("run", "--json", str(tmp_path / "run.json"), str(path), "--epochs", "2", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    loaders = json.loads((tmp_path / "run.json").read_text())["loaders"]
    train = next(loader for loader in loaders if loader["training_fraction"] == 1.0 and loader["split"] != "val")
    val = next(loader for loader in loaders if loader is not train)
    relative = os.path.relpath(path, tmp_path)
    assert train["site"] == f"{relative}:{line_of(path, lines[0])}"
    assert val["site"] == f"{relative}:{line_of(path, lines[1])}"
    if builder is None:  # no framework says which is which: the validation runs under no_grad
        assert train["split"] is None and val["training_fraction"] == 0.0
    else:
        assert train["split"] == "train" and val["split"] == "val"
    if builder:
        assert any(name.startswith(builder) for name in train["built_by"])
    else:  # the user's own line calls the constructor (Lightning only wraps it)
        assert train["built_by"] == []


@pytest.mark.slow
def test_a_lightning_training_is_tuned_at_its_hook_its_validation_loader_left_alone(tmp_path: Path) -> None:
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed")
    path = EXAMPLES / "lightning_train.py"
    done = dataprof("tune", "--budget", "1", "--trial-seconds", "2", "--no-loader-sweep", "--workdir",
                    str(tmp_path / "runs"), "--json", str(tmp_path / "tune.json"), str(path), "--epochs", "50",
                    "--workers", "1", cwd=tmp_path)
    assert done.returncode in (0, 4), done.stderr
    doc = json.loads((tmp_path / "tune.json").read_text())
    assert doc["loader"]["site"].endswith(f"lightning_train.py:{line_of(path, 'return DataLoader(self.train_set')}")
    assert doc["loader"]["split"] == "train" and doc["trials"][1]["role"] == "headspace"
    assert not (tmp_path / "lightning_logs").exists()  # Lightning's logs and checkpoints: in each run's directory
    assert (tmp_path / "runs" / "run-1" / "lightning_logs").is_dir()


@pytest.mark.slow
def test_a_script_that_spawns_its_own_ranks_stops_tune_with_one_line_and_is_noted_by_run(tmp_path: Path) -> None:
    path = EXAMPLES / "imagenet_train.py"
    args = (str(path), "--epochs", "1", "-j", "0", "--images", "64", "--multiprocessing-distributed",
            "--dist-url", "tcp://127.0.0.1:29533")
    tuned = dataprof("tune", "--budget", "1", "--no-loader-sweep", *args, cwd=tmp_path)
    assert tuned.returncode == 2, tuned.stderr
    error = tuned.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "starts ranks of its own (torch.multiprocessing.spawn at" in error
    assert "2 processes" in error and "--nproc-per-node" in error
    one = dataprof("tune", "--budget", "1", "--no-loader-sweep", *args, "--world-size", "1", cwd=tmp_path)
    assert one.returncode == 2 and "torch.multiprocessing.spawn at" in one.stderr  # one rank trains in a child too
    assert "1 process)" in one.stderr.strip().splitlines()[-1]
    ran = dataprof("run", "--json", str(tmp_path / "run.json"), *args, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["own_ranks"].startswith("torch.multiprocessing.spawn at") and "ranks ran unwatched" in ran.stdout

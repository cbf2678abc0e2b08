"""Real sweeps of DataLoader and DataModule targets: the loader's own sampler, collate_fn, worker_init_fn and
class survive into every trial, its settings are measured first, bad combinations are one-line errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dataprof.cli import main
from tests.conftest import FIXTURES


@pytest.fixture
def quick(quick: list[str]) -> list[str]:
    """The shortest trials, without the rules of thumb."""
    return [*quick, "--no-rules-of-thumb"]


def sweep(tmp_path: Path, *args: str) -> tuple[int, str, str, dict[str, Any] | None]:
    out = tmp_path / "run.json"
    result = CliRunner().invoke(main, ["sweep", *args, "--json", str(out)])
    data = json.loads(out.read_text()) if out.exists() else None
    return result.exit_code, result.stdout, result.stderr, data


@pytest.mark.slow
def test_a_loader_factory_is_swept_as_itself_with_its_own_settings_first(tmp_path: Path, loaders: str,
                                                                         quick: list[str]) -> None:
    code, stdout, stderr, data = sweep(tmp_path, f"{loaders}:make_loader", "--workers", "0,2,4", *quick)
    assert code == 0, stderr
    assert data is not None
    # every trial ran: the sampler (even indices), the collate (Items), worker_init_fn and the tag were kept
    assert [t["status"] for t in data["trials"]] == ["ok"] * len(data["trials"])
    assert [t["config"]["num_workers"] for t in data["trials"][:2]] == [0, 2]  # baseline, then yours
    assert data["search"]["steps"][1]["why"].startswith("your settings (w2 pf2 persist)")
    assert all(t["samples"] == 8 * t["batches"] for t in data["trials"])
    assert data["settings"]["batch_size"] == 8 and data["settings"]["current_source"] == "TaggedLoader"
    loader = data["dataset"]["loader"]
    assert loader["class"].endswith("TaggedLoader") and loader["sampler"] == "EvenSampler"
    assert data["dataset"]["sample"] == "Item"
    current = data["current"]
    assert current["config"] == {"num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
                                 "persistent_workers": True, "in_order": None, "multiprocessing_context": None,
                                 "worker_kind": "process"}
    assert current["status"] == "ok" and current["samples_per_s"] == data["trials"][1]["samples_per_s"]
    assert current["recommended_speedup"] == pytest.approx(data["best"]["samples_per_s"] / current["samples_per_s"])
    assert "your settings (w2 pf2 persist, TaggedLoader):" in stdout
    assert "TaggedLoader(..., " in stdout or "keep your TaggedLoader(...) as it is" in stdout


@pytest.mark.slow
def test_a_loader_of_batches_is_never_batched_again(tmp_path: Path, loaders: str, quick: list[str]) -> None:
    code, stdout, stderr, data = sweep(tmp_path, f"{loaders}:plain_batches", "--workers", "0,2", *quick)
    assert code == 0, stderr
    assert data is not None and data["dataset"]["batch_samples"] == 16 and data["settings"]["batch_size"] == 16
    for trial in data["trials"]:  # 62 batches of 16, then one of 8, each epoch: samples, not batches, are counted
        assert trial["status"] == "ok" and 15 * trial["batches"] < trial["samples"] <= 16 * trial["batches"]


@pytest.mark.slow
def test_batch_size_against_a_batch_sampler_is_a_usage_error(tmp_path: Path, loaders: str, quick: list[str]) -> None:
    code, _, stderr, _ = sweep(tmp_path, f"{loaders}:batch_sampler_loader", "--batch-size", "32", *quick)
    assert code == 2
    assert "--batch-size 32: DataLoader takes its batches from its batch_sampler (BatchSampler)" in stderr
    assert "wins; drop --batch-size" in stderr and "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.parametrize(("target", "message"), [
    ("not_a_loader", "not_a_loader returned a Wrapper, which is neither a Dataset"),
    ("BrokenDataModule", "BrokenDataModule.setup('fit') raised FileNotFoundError: no data under "
                         "/nonexistent/imagenet (at "),
])
def test_a_target_that_gives_no_loader_is_one_line(tmp_path: Path, target: str, message: str, loaders: str,
                                                   quick: list[str]) -> None:
    code, _, stderr, _ = sweep(tmp_path, f"{loaders}:{target}", *quick)
    assert code == 3 and message in stderr and "Traceback" not in stderr
    if target == "BrokenDataModule":
        assert "loaders.py:" in stderr


@pytest.mark.slow
def test_a_datamodule_stand_in_sweeps_the_split_asked_for(tmp_path: Path, loaders: str, quick: list[str]) -> None:
    code, _, stderr, data = sweep(tmp_path, f"{loaders}:StandInDataModule", "--split", "val", "--workers", "0,2",
                                  *quick)
    assert code == 0, stderr
    assert data is not None and data["settings"]["split"] == "val" and data["settings"]["batch_size"] == 8
    assert data["dataset"]["length"] == 1000 and data["current"]["config"]["num_workers"] == 0
    assert data["current"]["source"] == "StandInDataModule.val_dataloader()"


@pytest.mark.slow
@pytest.mark.parametrize(("current", "label", "kind"), [
    ("num_workers=1", "w1 pf2 respawn", "process"),
    pytest.param("num_workers=3,worker_kind=thread", "t3 pf2", "thread", marks=pytest.mark.skipif(
        importlib.util.find_spec("torchdata") is None, reason="torchdata is not installed")),
])
def test_current_gives_a_dataset_target_your_settings(tmp_path: Path, quick: list[str], current: str, label: str,
                                                      kind: str) -> None:
    code, stdout, stderr, data = sweep(tmp_path, f"{FIXTURES / 'datasets.py'}:Sleepy", "--arg", "sleep_ms=2",
                                       "--batch-size", "8", "--workers", "0,2", "--current", current, *quick)
    assert code == 0, stderr
    assert data is not None and data["current"]["source"] == "--current"
    config = data["current"]["config"]
    assert (config["num_workers"], config["worker_kind"], data["current"]["status"]) == (int(label[1]), kind, "ok")
    assert f"your settings ({label}, --current):" in stdout


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")
def test_a_real_lightning_datamodule(tmp_path: Path, quick: list[str]) -> None:
    code, stdout, stderr, data = sweep(tmp_path, f"{FIXTURES / 'lightning_datamodule.py'}:SquaresDataModule",
                                       "--arg", "batch_size=32", "--workers", "0,2", *quick)
    assert code == 0, stderr
    assert data is not None and data["settings"]["batch_size"] == 32 and data["settings"]["shuffle"] is True
    assert data["dataset"]["length"] == 3200  # setup('fit') ran: the train split
    assert data["current"]["config"]["num_workers"] == 2
    assert "your settings (w2 pf2 respawn, SquaresDataModule.train_dataloader()):" in stdout
    assert "# in SquaresDataModule.train_dataloader(), the rest as you have it" in stdout \
        or "keep your DataLoader(...) as it is" in stdout


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torchdata") is None, reason="torchdata is not installed")
def test_torchdatas_stateful_dataloader_is_swept_as_itself(tmp_path: Path, loaders: str, quick: list[str]) -> None:
    code, _, stderr, data = sweep(tmp_path, f"{loaders}:stateful_loader", "--workers", "0,2", *quick)
    assert code == 0, stderr
    assert data is not None and all(t["status"] == "ok" for t in data["trials"])
    loader = data["dataset"]["loader"]
    assert loader["class"].endswith("StatefulDataLoader") and "snapshot_every_n_steps" in loader["extra_arguments"]


@pytest.mark.slow
def test_the_python_api_sweeps_a_loader_object_rebuilt_from_its_attributes(loaders: str) -> None:
    import dataprof

    spec = importlib.util.spec_from_file_location("api_loader_fixtures", loaders)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = dataprof.sweep(module.make_loader(), workers=[0, 2], trial_seconds=0.3, prefetch_factor=[2],
                            rules_of_thumb=False)
    assert all(t.status == "ok" for t in report.trials)  # sampler, collate, worker_init_fn and tag kept
    assert report.dataset is not None and report.dataset.loader is not None
    assert report.dataset.loader.rebuilt_from == "its attributes"
    assert report.current is not None and report.current.config.num_workers == 2

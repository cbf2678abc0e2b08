"""PaddlePaddle: framework detection, knob discovery, real sweeps, Paddle's autotune, errors, inspect.

Real sweeps start real ``paddle.io.DataLoader`` processes; figures are checked
for consistency, never against a stopwatch. The whole module skips where
paddlepaddle is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

if importlib.util.find_spec("paddle") is None:  # found without importing it: the import takes over a second
    pytest.skip('paddlepaddle is not installed (pip install -e ".[dev,paddle]")', allow_module_level=True)

from dataprof.backends import detect_framework, get_backend  # noqa: E402
from dataprof.backends.paddle_backend import PaddleBackend  # noqa: E402
from dataprof.cli import main  # noqa: E402
from dataprof.decide.search import AUTOTUNE_RULE, rules_of_thumb  # noqa: E402
from dataprof.decide.search.grid import grid_configs  # noqa: E402
from dataprof.decide.settings import resolve_settings  # noqa: E402
from dataprof.errors import UsageError  # noqa: E402
from dataprof.results.codec import encode
from dataprof.results.environment import ProbeReply  # noqa: E402
from dataprof.results.knobs import LoaderConfig  # noqa: E402
from dataprof.results.registry import KNOBS  # noqa: E402
from dataprof.results.settings import SweepSettings  # noqa: E402
from dataprof.results.space import SearchSpace  # noqa: E402
from tests.conftest import ROOT, Invoke, shm_left, shm_names


@pytest.fixture
def quick(quick: list[str]) -> list[str]:
    """The shortest trials, in batches of 8."""
    return [*quick, "--batch-size", "8"]


@pytest.fixture
def paddle_module(paddle_datasets: str) -> Any:
    """The module of the paddle.io test datasets."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("paddle_datasets", paddle_datasets)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shared_memory_files_of_ended_paddle_processes_are_named_by_their_pid() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    gone = 2**22 + 17  # above Linux's largest pid: no live process has it
    mine = [shm / f"paddle_{gone}_0_123", shm / f"paddle_{gone}_1_456"]
    other = shm / f"paddle_{gone + 1}_0_789"
    for path in (*mine, other):
        path.write_bytes(b"batch")
    try:
        assert sorted(PaddleBackend().left_behind({gone})) == sorted(map(str, mine))
        assert get_backend("torch").left_behind({gone}) == []
    finally:
        for path in (*mine, other):
            path.unlink()


@pytest.mark.slow  # imports paddle (over a second)
def test_auto_detects_paddle_datasets_and_keeps_others_on_torch(paddle_module: Any) -> None:
    from tests.fixtures.datasets import Tiny

    assert detect_framework(paddle_module.Sleepy(), "auto") == "paddle"  # type: ignore[operator]
    assert detect_framework(paddle_module.Stream(), "auto") == "paddle"  # type: ignore[operator]
    assert detect_framework(Tiny(), "auto") == "torch"
    assert detect_framework([1, 2, 3], "auto") == "torch"
    assert detect_framework(Tiny(), "paddle") == "paddle"  # an explicit choice wins
    assert get_backend("paddle").dataset_kind(paddle_module.Stream()) == "iterable"  # type: ignore[operator]


@pytest.mark.slow  # imports paddle (over a second)
def test_knobs_come_from_the_installed_signature() -> None:
    arguments = PaddleBackend().loader_arguments()
    assert set(KNOBS["paddle"]) <= set(arguments)
    assert "pin_memory" not in arguments


def settings(**kwargs: object) -> SweepSettings:
    space = SearchSpace(workers=(0, 2), prefetch_factors=(2, 4), use_shared_memory=(True, False),
                        use_buffer_reader=(True, False))
    return SweepSettings(target="x.py:D", space=space, framework="auto", device="auto", **kwargs)  # type: ignore[arg-type]


def test_a_knob_missing_from_the_installed_version_is_skipped_not_faked() -> None:
    older = {"framework": "paddle", "loader_arguments": ["dataset", "batch_size", "num_workers", "use_shared_memory",
                                                         "use_buffer_reader", "timeout"]}
    resolved = resolve_settings(settings(), ProbeReply.of(older), count_devices=lambda framework: 0)
    assert resolved.framework == "paddle" and resolved.device == "cpu"
    assert resolved.space.skipped == ("prefetch_factor", "persistent_workers", "reader_buffer_size")
    configs = grid_configs(resolved.space)
    assert all(c.prefetch_factor is None and not c.persistent_workers for c in configs)
    assert all("prefetch_factor" not in c.dataloader_kwargs() and "persistent_workers" not in c.dataloader_kwargs()
               for c in configs)
    assert encode(resolved)["skipped_knobs"] == ["prefetch_factor", "persistent_workers", "reader_buffer_size"]
    assert "pin_memory" not in encode(resolved)


def test_framework_specific_options_are_checked_against_the_framework_found() -> None:
    paddle = {"framework": "paddle", "loader_arguments": list(KNOBS["paddle"])}
    with pytest.raises(UsageError, match="no pin_memory argument"):
        resolve_settings(settings(given=("pin_memory",)), ProbeReply.of(paddle), count_devices=lambda framework: 0)
    with pytest.raises(UsageError, match="paddle.io.DataLoader only"):
        resolve_settings(settings(given=("use_shared_memory",)), ProbeReply.of({"framework": "torch"}),
                         count_devices=lambda framework: 0)
    asked: list[str] = []
    resolve_settings(settings(), ProbeReply.of(paddle),
                     count_devices=lambda framework: asked.append(framework) or 0)
    assert asked == ["paddle"]  # the device is looked up with the framework's own API


def test_paddle_configs_use_paddle_names_and_defaults() -> None:
    space = SearchSpace(workers=(0, 4), framework="paddle")
    config = space.config(4, use_shared_memory=False)
    assert config.to_dict() == {"num_workers": 4, "use_shared_memory": False, "prefetch_factor": 2,
                                "use_buffer_reader": True, "persistent_workers": True, "reader_buffer_size": None,
                                "worker_kind": "process"}
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert config.label() == "w4 pf2 persist no-shm"
    assert space.config(0).is_baseline and not space.config(0, use_buffer_reader=False).is_baseline
    autotune = dict(rules_of_thumb(8, space, autotune=2))[AUTOTUNE_RULE]
    assert autotune.to_dict() == {"num_workers": 2, "use_shared_memory": True, "prefetch_factor": 2,
                                  "use_buffer_reader": True, "persistent_workers": False,
                                  "reader_buffer_size": None, "worker_kind": "process"}  # Paddle's defaults


@pytest.mark.slow
def test_real_paddle_sweep_with_autotune_comparison(tmp_path: Path, cli: Invoke, paddle_datasets: str,
                                                    quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{paddle_datasets}:Sleepy", "--workers", "0,2", *quick, "--json", str(out))
    assert code == 0, stderr
    run = json.loads(out.read_text())
    assert run["environment"]["framework"] == "paddle" and run["environment"]["paddle"]
    assert all(set(t["config"]) == {*KNOBS["paddle"], "worker_kind"} for t in run["trials"])
    assert all(t["status"] == "ok" for t in run["trials"]), run["trials"]
    by_label = {LoaderConfig.from_dict(t["config"]).label(): t for t in run["trials"]}
    assert by_label["w2 pf2 persist"]["worker_processes"] == 2
    at_pick = [LoaderConfig.from_dict(t["config"]) for t in run["trials"] if t["config"]["num_workers"] == 2]
    # Paddle's knobs tuned at the pick, one after the other: the second on top of the first when the first won
    assert any(c.use_shared_memory is False for c in at_pick) and any(c.use_buffer_reader is False for c in at_pick)
    tuned = run["autotune"]
    assert tuned["status"] == "ok" and tuned["tuning_steps"] == 50
    assert tuned["evaluations"][0]["num_workers"] == 0
    assert tuned["num_workers"] == 0 or tuned["num_workers"] < tuned["max_workers"]  # it stays below cpu_count/2
    row = next(r for r in run["rules_of_thumb"] if r["rule"] == AUTOTUNE_RULE)
    assert row["config"]["num_workers"] == tuned["num_workers"] and row["config"]["persistent_workers"] is False
    assert row["status"] == "ok" and row["samples_per_s"] > 0
    assert "paddle.io.DataLoader(dataset, batch_size=8, num_workers=" in stdout
    assert "Paddle's autotune (paddle.incubate.autotune, tuning_steps=50)" in stdout
    assert "pin_memory" not in stdout


@pytest.mark.slow
def test_framework_torch_sweeps_a_paddle_dataset_with_torchs_loader(tmp_path: Path, cli: Invoke, paddle_datasets: str,
                                                                    quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{paddle_datasets}:Sleepy", "--arg", "sleep_ms=1", "--framework", "torch",
                               "--workers", "0,2", *quick, "--no-rules-of-thumb", "--json", str(out))
    assert code == 0, stderr
    run = json.loads(out.read_text())
    assert run["environment"]["framework"] == "torch" and run["autotune"] is None
    assert all(set(t["config"]) == {*KNOBS["torch"], "worker_kind"} and t["status"] == "ok" for t in run["trials"])
    assert "\nDataLoader(dataset, batch_size=8" in stdout


@pytest.mark.slow
def test_factory_returning_a_paddle_dataset_is_detected(tmp_path: Path, cli: Invoke, paddle_datasets: str,
                                                        quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{paddle_datasets}:make_sleepy", "--arg", "sleep_ms=1", "--workers", "0", *quick,
                          "--no-rules-of-thumb", "--json", str(out))
    assert code == 0, stderr
    assert json.loads(out.read_text())["environment"]["framework"] == "paddle"


@pytest.mark.slow
@pytest.mark.parametrize(("attr", "workers", "message"), [
    ("RaisesAt", "0,2", "dataset[40] raised ValueError: corrupt record 40"),
    ("Ragged", "0,2", "samples cannot be batched by default_collate_fn"),
])
def test_paddle_target_errors_exit_3_like_torch(attr: str, workers: str, message: str, cli: Invoke,
                                                paddle_datasets: str, quick: list[str]) -> None:
    code, stdout, stderr = cli("sweep", f"{paddle_datasets}:{attr}", "--workers", workers, *quick,
                               "--no-rules-of-thumb")
    assert code == 3, stderr
    assert message in stderr and "Traceback" not in stderr + stdout


@pytest.mark.slow
def test_worker_errors_and_crashes_are_classified_and_the_sweep_goes_on(tmp_path: Path, cli: Invoke,
                                                                        paddle_datasets: str, quick: list[str]) -> None:
    for attr, status, words in [("RaisesInWorker", "failed", "KeyError: 'missing label for"),
                                ("SegfaultInWorker", "crashed", "SIGSEGV")]:
        out = tmp_path / f"{attr}.json"
        before = shm_names()
        code, _, stderr = cli("sweep", f"{paddle_datasets}:{attr}", "--workers", "0,2", *quick, "--no-rules-of-thumb",
                              "--use-shared-memory", "on", "--use-buffer-reader", "on", "--json", str(out))
        assert code == 0, stderr
        assert not shm_left(before)  # nor did a crashed worker's batches stay in /dev/shm
        trials = json.loads(out.read_text())["trials"]
        assert trials[0]["status"] == "ok"
        assert trials[1]["status"] == status and words in trials[1]["error"], trials[1]
        assert "Traceback" not in trials[1]["error"]


@pytest.mark.slow
def test_options_of_the_other_framework_are_usage_errors(cli: Invoke, datasets: str, paddle_datasets: str,
                                                         quick: list[str]) -> None:
    code, _, stderr = cli("sweep", f"{paddle_datasets}:Sleepy", "--pin-memory", "on", *quick)
    assert code == 2 and "paddle.io.DataLoader has no pin_memory argument" in stderr
    code, _, stderr = cli("sweep", f"{datasets}:Tiny", "--use-buffer-reader", "off", *quick)
    assert code == 2 and "paddle.io.DataLoader only" in stderr
    code, _, stderr = cli("sweep", f"{paddle_datasets}:Sleepy", "--framework", "torch", "--use-shared-memory", "on",
                          *quick)
    assert code == 2 and "paddle.io.DataLoader only" in stderr


@pytest.mark.slow
def test_a_paddle_run_never_imports_torch(tmp_path: Path, paddle_datasets: str, quick: list[str]) -> None:
    blocker = tmp_path / "torch"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('torch was imported in a Paddle run')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "dataprof", "sweep", f"{paddle_datasets}:Sleepy", "--workers", "0,2",
                           *quick, "--no-rules-of-thumb", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert all(t["status"] == "ok" for t in json.loads(out.read_text())["trials"])


@pytest.mark.slow
def test_a_paddle_dataset_found_by_auto_gets_a_host_without_torch(tmp_path: Path, cli: Invoke, paddle_datasets: str,
                                                                  quick: list[str]) -> None:
    # torch is installed, so the host expects it and imports it before its probe; the probe finds Paddle, and
    # the trials must come from a fresh host that never imported torch
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{paddle_datasets}:FailsBesideTorch", "--workers", "0,2", *quick,
                          "--no-rules-of-thumb", "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["environment"]["framework"] == "paddle"
    assert doc["trials"] and all(t["status"] == "ok" for t in doc["trials"])


@pytest.mark.slow  # imports paddle (over a second)
def test_inspect_times_paddle_vision_stages(tmp_path: Path, paddle_datasets: str) -> None:
    out = tmp_path / "inspect.json"
    result = CliRunner().invoke(main, ["inspect", f"{paddle_datasets}:Augmented", "--samples", "20", "--batch-size",
                                       "8", "--json", str(out)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["environment"]["framework"] == "paddle"
    assert [t["name"] for t in doc["transforms"]][:1] == ["SlowStage"]  # it sleeps 3 ms; the others take µs
    assert {"RandomHorizontalFlip", "ToTensor"} <= {t["name"] for t in doc["transforms"]}


@pytest.mark.slow
def test_an_iterable_paddle_sweep_measures_only_configs_that_survive_an_epoch_end(tmp_path: Path, cli: Invoke,
                                                                                  paddle_datasets: str,
                                                                                  quick: list[str]) -> None:
    out = tmp_path / "run.json"
    before = shm_names()
    code, stdout, stderr = cli("sweep", f"{paddle_datasets}:Stream", "--arg", "n=64", "--workers", "0,2",
                               "--persistent-workers", "on,off", *quick, "--json", str(out))
    assert code == 0, stderr
    # the epoch check ended a hung persistent loader: the batches its workers had made in /dev/shm went with it
    assert not shm_left(before)
    run = json.loads(out.read_text())
    assert all(t["status"] == "ok" for t in run["trials"]), run["trials"]
    # Short epochs: the trials with workers crossed epoch ends, where a broken persistent loader fails.
    assert all((t["epochs_started"] or 1) > 1 for t in run["trials"] if t["config"]["num_workers"] == 2)
    dropped = [n for n in run["notes"] if n.startswith("persistent_workers=True not tried")]
    persistent = [t for t in run["trials"] if t["config"]["persistent_workers"]]
    assert bool(dropped) != bool(persistent), (dropped, persistent)
    assert "IterableDataset" in run["autotune"]["skipped"] and "tuned nothing" in stdout

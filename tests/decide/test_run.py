"""``dataprof run``'s decisions: the verdict, the next step, the gates."""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

import pytest

from dataprof.decide.run import judge
from dataprof.results.run import RunReport
from dataprof.results.text import parse_current
from tests.conftest import run_report


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
    judged = judge(run_report(wait, **kwargs))
    assert judged.verdict is not None and (judged.verdict.id, judged.verdict.severity) == (verdict, severity)
    assert f"{wait:.0%}" in judged.verdict.evidence


def test_the_next_step_is_a_sweep_with_the_measured_step() -> None:
    # the loader's own settings go with it as --current (those away from the DataLoader's defaults): the sweep
    # measures them first, against its pick
    assert judge(run_report(0.3)).next_command == "dataprof sweep train.py:Images --batch-size 32 --step-ms 40.0 " \
                                                  "--current num_workers=2,persistent_workers=true"
    assert judge(run_report(0.3, module="mypkg.data")).next_command.startswith("dataprof sweep mypkg.data:Images ")
    report = run_report(0.3)
    threads = dataclasses.replace(report.loaders[0], worker_kind="thread", persistent_workers=None, prefetch_factor=4,
                                  start_method="fork", start_method_chosen=True)
    command = judge(dataclasses.replace(report, loaders=(threads,))).next_command
    assert command.endswith(" --worker-kind process,thread "
                            "--current num_workers=2,prefetch_factor=4,worker_kind=thread")
    assert parse_current(command.rpartition("--current ")[2]).label() == "t2 pf4"
    chosen = dataclasses.replace(report.loaders[0], start_method="spawn", start_method_chosen=True,
                                 other_knobs={"in_order": False})
    assert judge(dataclasses.replace(report, loaders=(chosen,))).next_command.endswith(
        " --current num_workers=2,persistent_workers=true,in_order=false,multiprocessing_context=spawn")


def test_a_library_dataset_built_from_the_script_s_data_leaves_its_target_to_the_user() -> None:
    # `dataprof sweep datasets.arrow_dataset:Dataset` cannot build a Hugging Face dataset: it needs the script's data
    report = run_report(0.3, module="datasets.arrow_dataset")
    library = dataclasses.replace(report.loaders[0], dataset="Dataset", dataset_library=True)
    command = judge(dataclasses.replace(report, loaders=(library,))).next_command
    assert command.startswith("dataprof sweep MODULE:FUNCTION --batch-size 32 --step-ms 40.0 --current ")
    assert command.endswith("# MODULE:FUNCTION: a function of yours that returns the datasets.arrow_dataset.Dataset "
                            "(a library's class, built from the script's data)")
    assert shlex.split(command, comments=True)[2] == "MODULE:FUNCTION"
    data = json.loads(judge(dataclasses.replace(report, loaders=(library,))).to_json())
    assert data["loaders"][0]["dataset_library"] is True
    assert "dataset_library" not in json.loads(judge(report).to_json())["loaders"][0]


def test_a_loader_whose_batch_sampler_makes_its_batches_is_swept_whole_not_its_dataset_at_batch_one() -> None:
    report = run_report(0.3)
    sampled = dataclasses.replace(report.loaders[0], batch_size=None)
    judged = judge(dataclasses.replace(report, loaders=(sampled,)))
    assert judged.next_command == (
        "dataprof sweep MODULE:FUNCTION --step-ms 40.0  # MODULE:FUNCTION: a function of yours that returns the "
        f"DataLoader built at {sampled.site} (its batches come from its batch sampler or its dataset, not a batch "
        "size: a sweep of Images alone would batch them again)")
    assert judged.verdict is not None and "batch None" not in judged.verdict.evidence
    assert "Images, batch 32, num_workers=2" in judge(report).verdict.evidence  # type: ignore[union-attr]


def test_the_run_document_round_trips() -> None:
    report = judge(run_report(0.3))
    data = json.loads(report.to_json())
    assert data["kind"] == "run" and data["loaders"][0]["data_wait_fraction"] == 0.3
    assert data["loaders"][0]["gpu_util_percent"] is None
    assert RunReport.from_dict(data) == report
    assert dataclasses.asdict(RunReport.from_dict(data).loaders[0]) == dataclasses.asdict(report.loaders[0])


def test_run_gates_pass_and_fail_with_their_numbers() -> None:
    from dataprof.decide.gates import RunGates, evaluate_run

    report = judge(run_report(0.3))
    results = {g.gate: g for g in evaluate_run(report, RunGates(max_data_wait=0.1, min_throughput=500.0,
                                                                min_gpu_util=50.0))}
    assert not results["max_data_wait"].passed and "30.0% > 10%" in results["max_data_wait"].message
    assert results["min_throughput"].passed
    assert not results["min_gpu_util"].passed and "not measured" in results["min_gpu_util"].message
    faster = dataclasses.replace(report, loaders=(dataclasses.replace(report.loaders[0], samples_per_s=1000.0),))
    regression = evaluate_run(report, RunGates(max_regression=0.1), baseline=faster)[0]
    assert not regression.passed and "−20.0%" in regression.message.replace("-", "−")
    assert evaluate_run(faster, RunGates(max_regression=0.1), baseline=report)[0].passed


def test_short_epochs_whose_start_dominates_are_told_apart_from_a_fine_steady_state() -> None:
    report = run_report(0.02)
    short = dataclasses.replace(report, loaders=(dataclasses.replace(
        report.loaders[0], warmup_wait_fraction=0.4, epochs=5, first_batch_s=(1.0, 1.0, 1.0, 1.0, 1.0)),))
    verdict = judge(short).verdict
    assert verdict is not None and verdict.id == "epoch_start" and "32%" in verdict.evidence  # 4 of the 5 starts
    assert "(persistent_workers=True)" not in verdict.recommendation  # its workers persist already
    assert judge(report).verdict.id == "model_bound"  # type: ignore[union-attr]
    # one epoch: its start is the training's start-up, however long, not a sign of short epochs
    started = dataclasses.replace(report, loaders=(dataclasses.replace(report.loaders[0], warmup_wait_fraction=0.4),))
    assert judge(started).verdict.id == "model_bound"  # type: ignore[union-attr]


def test_epoch_starts_that_outweigh_a_moderate_steady_wait_are_the_verdict_not_more_workers() -> None:
    """Spawned workers started anew at each 20-batch epoch, each with a 200 MB dataset pickled into it: 11% steady
    wait, but 3.6-4.0 s at every epoch's start, 88% of the time. The verdict was 'I/O-bound: more workers or a
    larger prefetch_factor hide it', where more spawned workers start slower still."""
    report = run_report(0.11)
    loader = dataclasses.replace(report.loaders[0], persistent_workers=False, warmup_wait_fraction=0.88, epochs=7,
                                 first_batch_s=(3.64, 3.65, 4.04, 3.94, 3.9, 3.8, 3.7))
    verdict = judge(dataclasses.replace(report, loaders=(loader,))).verdict
    assert verdict is not None and verdict.id == "epoch_start" and "76%" in verdict.evidence
    assert "persistent_workers=True" in verdict.recommendation
    assert judge(report).verdict.id == "io_bound"  # type: ignore[union-attr]  # the starts cheap: as it was


def test_the_next_step_sweeps_the_factory_that_built_the_loader() -> None:
    report = run_report(0.3)
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

"""The model of a pipeline, fitted from recorded sweeps, and what it predicts for other machines."""

from __future__ import annotations

import json

import pytest

from dataprof.decide.model import fit, predict
from dataprof.results.sweep import Report
from tests.conftest import recorded


def model_of(name: str):  # type: ignore[no-untyped-def]
    model = fit(recorded("sweep", name))
    assert model is not None
    return model


def test_a_latency_bound_pipeline_is_its_wait_and_scales_with_workers() -> None:
    model = model_of("io_bound")  # 5 ms sleeps per sample, 0.1 ms of CPU
    assert model.wait_s_per_sample.value == pytest.approx(0.0051, rel=0.02)
    assert model.worker_cpu_s_per_sample.value < 0.0002
    assert all(abs(r.error) < 0.02 for r in model.residuals)  # every trial given back within 2%
    eight, sixteen = (predict(model, w, 2.0, 0.0) for w in (8, 16))
    assert sixteen.samples_per_s == pytest.approx(2 * eight.samples_per_s, rel=0.01) and sixteen.limit == "workers"
    assert predict(model, 64, 2.0, 0.020).limit == "step"  # a 20 ms step: the loader keeps up
    assert predict(model, 64, 2.0, 0.005).limit == "main"  # at 5 ms, receiving a batch is 9% of each iteration


def test_a_cpu_bound_pipeline_is_its_cpu_and_halves_on_half_the_cpus() -> None:
    model = model_of("cpu_bound")
    assert model.cpu_share == pytest.approx(0.95, abs=0.01)  # 1.9 of 2 CPUs at most
    two, one = predict(model, 4, 2.0, 0.0), predict(model, 4, 1.0, 0.0)
    assert two.limit == one.limit == "cpus" and one.samples_per_s == pytest.approx(two.samples_per_s / 2, rel=0.01)
    assert one.low < one.samples_per_s < one.high


def test_a_cpu_share_no_trial_reached_is_assumed_and_said() -> None:
    waiting = model_of("io_bound")  # sleeps: no trial comes near the CPUs' ceiling
    assert waiting.cpu_share == 0.95
    assert any(n.startswith("no trial used the CPUs up (at most ") and "taken as 95%" in n for n in waiting.notes)
    assert not any(n.startswith("no trial used the CPUs up") for n in model_of("cpu_bound").notes)


def test_a_main_process_bound_pipeline_gains_nothing_from_more_cpus() -> None:
    model = model_of("main_process_bound")
    many = predict(model, 64, 96.0, 0.0)
    assert many.limit == "main" and many.samples_per_s == pytest.approx(predict(model, 64, 4.0, 0.0).samples_per_s)


def test_workers_started_again_each_epoch_are_predicted_back_but_not_fitted() -> None:
    model = model_of("worker_startup")
    respawned = next(r for r in model.residuals if "respawn" in r.config)
    assert respawned.error < -0.5 and any("not fitted" in note for note in model.notes)
    assert model.worst_residual == respawned


def test_trials_without_the_cpu_figures_give_no_model() -> None:
    assert fit(recorded("sweep", "latency")) is None  # recorded before the tree's CPU was read


def test_the_model_is_part_of_the_document_and_reads_back() -> None:
    report = Report.from_dict(json.loads(recorded("sweep", "io_bound").to_json()))  # as saved, undecided
    from dataprof.decide.sweep import decide

    decided = decide(report)
    again = Report.from_dict(json.loads(decided.to_json()))
    assert decided.model is not None and again.model == decided.model
    assert json.loads(decided.to_json())["model"]["residuals"][0]["error"] == decided.model.residuals[0].error

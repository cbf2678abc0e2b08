"""Every diagnosis rule, firing and quiet, on runs recorded from examples/scenarios (tests/data/sweep).

Runs were recorded on a 2-CPU machine without a GPU, except transfer_bound and
cuda_io_bound (an H200 machine). Variants are made by editing one measured
figure, so each test shows which number a rule reads.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dataprof.decide.diagnose import PRIMARY_KINDS, diagnose, primary, step
from dataprof.decide.diagnose import findings as rules
from dataprof.decide.diagnose.facts import severity_for
from dataprof.decide.thresholds import Thresholds
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from tests.conftest import DATA

RUNS = DATA / "sweep"
TH = Thresholds()


def run(name: str) -> Report:
    return Report.from_dict(json.loads((RUNS / f"{name}.json").read_text()))


def with_trials(report: Report, change) -> Report:  # type: ignore[no-untyped-def]
    return dataclasses.replace(report, trials=tuple(change(t) for t in report.trials))


@pytest.mark.parametrize("name, expected", [
    ("model_bound", "model_bound"), ("io_bound", "io_bound"), ("cpu_bound", "cpu_bound"),
    ("main_process_bound", "main_process_bound"), ("memory_bound", "memory_bound"),
    ("transfer_bound", "transfer_bound"), ("cuda_io_bound", "io_bound"), ("ipc_overhead", "main_process_bound"),
    ("paddle_buffer_reader", "main_process_bound"),
])
def test_primary_verdict_of_each_recorded_run(name: str, expected: str) -> None:
    verdict, findings = diagnose(run(name))
    assert verdict == expected
    assert findings[0].id == expected and findings[0].evidence and findings[0].recommendation
    assert expected in PRIMARY_KINDS


def test_healthy_loader_gets_a_short_answer() -> None:
    verdict, findings = diagnose(run("model_bound"))
    assert verdict == "model_bound"
    assert [f.severity for f in findings] == ["info", "info"]  # the verdict and no_gpu
    assert "not your bottleneck" in findings[0].recommendation


def test_model_bound_quiet_when_the_loop_waits() -> None:
    report = run("model_bound")
    waiting = with_trials(report, lambda t: dataclasses.replace(t, wait_fraction=0.3))
    assert step.model_bound(waiting, TH) is None


def test_io_bound_says_to_add_workers_while_throughput_rises() -> None:
    finding = primary.io_bound(run("io_bound"), TH)
    assert finding is not None and "still rises" in finding.evidence and "--workers 8,16,32" in finding.recommendation


def test_cpu_bound_shows_the_ceiling_and_is_quiet_for_io() -> None:
    finding = primary.cpu_bound(run("cpu_bound"), TH)
    assert finding is not None and "can load at most" in finding.evidence and "of that ceiling" in finding.evidence
    assert primary.cpu_bound(run("io_bound"), TH) is None


def test_a_machine_full_of_other_work_makes_a_waiting_loader_cpu_bound_once_workers_stop_helping() -> None:
    def busy_and_flat(t: TrialResult) -> TrialResult:
        flat = 773.0 if t.config.num_workers == 8 else t.samples_per_s
        return t.replaced(cpu_percent_system=97.0, samples_per_s=flat)

    crowded = with_trials(run("io_bound"), busy_and_flat)
    finding = primary.cpu_bound(crowded, TH)
    assert finding is not None and "the machine's CPUs are 97% busy in all, other processes included" \
        in finding.evidence
    assert "free the CPUs other processes take" in finding.recommendation
    # The same busy machine, but each doubling of workers still doubles throughput: the CPUs are not the limit.
    scaling = with_trials(run("io_bound"), lambda t: t.replaced(cpu_percent_system=97.0))
    assert primary.cpu_bound(scaling, TH) is None
    assert diagnose(scaling)[0] == "io_bound"


def test_paddles_buffer_reader_thread_is_the_one_loading_at_num_workers_0() -> None:
    # Paddle at w0 with use_buffer_reader: a thread of the main process loads ahead; the main thread only takes.
    finding = primary.main_process_bound(run("paddle_buffer_reader"), TH)
    assert finding is not None and "Paddle's buffer-reader thread loads and collates each batch" in finding.evidence
    no_buffer = with_trials(run("paddle_buffer_reader"), lambda t: dataclasses.replace(
        t, config=dataclasses.replace(t.config, use_buffer_reader=False)) if t.config.num_workers == 0 else t)
    assert primary.main_process_bound(no_buffer, TH) is None  # its main thread alone hardly computes


def test_main_process_bound_names_the_transfer_and_is_quiet_when_the_main_thread_is_starved() -> None:
    finding = primary.main_process_bound(run("main_process_bound"), TH)
    assert finding is not None and "unpickling" in finding.evidence and "64 tensors" in finding.evidence
    # Same timings, but the main thread hardly ran on CPU while receiving: busy workers starved it.
    starved = with_trials(run("main_process_bound"), lambda t: t.replaced(
        wait_cpu_ms_mean=0.05 * (t.times.receive_ms_mean or 0.0)))
    assert primary.main_process_bound(starved, TH) is None
    assert primary.main_process_bound(run("io_bound"), TH) is None


def test_main_process_bound_names_a_saturated_pin_memory_thread() -> None:
    pinned = run("transfer_bound")
    pin = next(t for t in pinned.trials if t.config.pin_memory)
    report = dataclasses.replace(pinned, recommendation=dataclasses.replace(
        pinned.recommendation, config=pin.config))  # type: ignore[arg-type]
    report = with_trials(report, lambda t: t.replaced(copy_ms_mean=0.0))
    finding = primary.main_process_bound(report, TH)
    assert finding is not None and "pin-memory thread" in finding.evidence


def test_memory_bound_fits_memory_per_worker_and_is_quiet_with_room() -> None:
    finding = primary.memory_bound(run("memory_bound"), TH)
    assert finding is not None and "per worker" in finding.evidence and "ran out" in finding.evidence
    io_bound = run("io_bound")
    roomy = dataclasses.replace(io_bound, settings=dataclasses.replace(io_bound.settings, memory_limit_bytes=10**12))
    assert primary.memory_bound(roomy, TH) is None


def test_transfer_bound_only_on_a_gpu_run() -> None:
    finding = step.transfer_bound(run("transfer_bound"), TH)
    assert finding is not None and "GB/s" in finding.evidence
    assert "did not help here" in finding.recommendation  # pinning was measured, and lost
    assert step.transfer_bound(run("cuda_io_bound"), TH) is None
    assert step.transfer_bound(run("io_bound"), TH) is None


def test_copy_on_read_fires_on_growing_workers_only() -> None:
    finding = rules.copy_on_read(run("copy_on_read"), TH)
    assert finding is not None and "per" not in finding.id and "each worker copied" in finding.evidence
    assert rules.copy_on_read(run("io_bound"), TH) is None
    assert rules.copy_on_read(run("memory_bound"), TH) is None  # big, but allocated before the window
    # the same USS growth, but made of pages of a memory-mapped file, copies no one's memory
    report = run("copy_on_read")
    mapped = tuple(t.replaced(workers_inherited_growth_bytes=2 * 2**20,
                                       workers_file_growth_bytes=140 * 2**20) for t in report.trials)
    assert rules.copy_on_read(dataclasses.replace(report, trials=mapped), TH) is None


def test_worker_startup_measures_the_persistent_gain() -> None:
    finding = rules.worker_startup(run("worker_startup"), TH)
    assert finding is not None and "as fast" in finding.evidence
    assert rules.worker_startup(run("io_bound"), TH) is None


def test_worker_startup_from_the_share_of_an_epoch() -> None:
    report = run("io_bound")
    short = dataclasses.replace(report, dataset=dataclasses.replace(report.dataset, length=2000))  # type: ignore
    slow = with_trials(short, lambda t: dataclasses.replace(t, first_batch_s=2.0))
    finding = rules.worker_startup(slow, TH)
    assert finding is not None and "of a" in finding.evidence and "epoch" in finding.evidence


def test_stragglers_need_a_heavy_tail_at_num_workers_0() -> None:
    finding = rules.stragglers(run("stragglers"), TH)
    assert finding is not None and "p99" in finding.evidence
    assert rules.stragglers(run("io_bound"), TH) is None
    assert rules.stragglers(run("transfer_bound"), TH) is None  # rare allocator spikes, not slow samples


def test_iterable_duplicates_from_epoch_length_or_repeats() -> None:
    report = run("iterable_duplicates")
    finding = rules.iterable_duplicates(report, TH)
    assert finding is not None and finding.severity == "critical" and "2.0×" in finding.evidence
    sharded = with_trials(report, lambda t: t.replaced(epoch_samples=2000, repeat_fraction=0.0))
    assert rules.iterable_duplicates(sharded, TH) is None
    endless = with_trials(report, lambda t: t.replaced(
        epoch_samples=None, repeat_fraction=0.5 if t.config.num_workers else 0.0))
    assert rules.iterable_duplicates(endless, TH) is not None
    assert rules.iterable_duplicates(run("io_bound"), TH) is None  # map-style


def test_shm_risk_against_free_shared_memory() -> None:
    report = run("transfer_bound")  # 38 MB batches
    small = dataclasses.replace(report, environment=dataclasses.replace(report.environment,
                                                                        shm_free_bytes=64 * 10**6))
    finding = rules.shm_risk(small, TH)
    assert finding is not None and finding.severity == "critical" and "--shm-size" in finding.recommendation
    assert rules.shm_risk(report, TH) is None


def test_oversubscribed_when_more_workers_than_cpus_lose() -> None:
    report = run("cpu_bound")  # w4 on 2 CPUs, as fast as w2: no finding
    assert rules.oversubscribed(report, TH) is None
    slower = with_trials(report, lambda t: dataclasses.replace(t, samples_per_s=(t.samples_per_s or 0) * 0.6)
                         if t.config.num_workers == 4 else t)
    finding = rules.oversubscribed(slower, TH)
    assert finding is not None and "% less than w2" in finding.evidence
    assert rules.oversubscribed(run("io_bound"), TH) is None  # w8 on 2 CPUs is faster there


def test_ipc_overhead_when_workers_lose_to_transfer_cost() -> None:
    finding = rules.ipc_overhead(run("ipc_overhead"), TH)
    assert finding is not None and "receiving one from a worker" in finding.evidence
    assert rules.ipc_overhead(run("io_bound"), TH) is None
    assert rules.ipc_overhead(run("model_bound"), TH) is None  # num_workers=0 keeps up: nothing to save


def test_no_gpu_only_on_a_simulated_device() -> None:
    assert rules.no_gpu(run("io_bound"), TH) is not None
    assert rules.no_gpu(run("transfer_bound"), TH) is None


@pytest.mark.parametrize("share, step, expected", [
    (0.04, 10, "info"), (0.05, 10, "warning"), (0.19, 10, "warning"), (0.2, 10, "critical"), (0.9, 0, "info"),
])
def test_severity_follows_the_wait_share(share: float, step: float, expected: str) -> None:
    report = dataclasses.replace(run("io_bound"), settings=dataclasses.replace(run("io_bound").settings, step_ms=step))
    assert severity_for(share, TH, report) == expected


def test_break_even_is_the_loader_batch_interval() -> None:
    report = run("io_bound")
    finding = primary.io_bound(report, TH)
    assert report.recommendation is not None
    rec = next(t for t in report.trials if t.config == report.recommendation.config)
    interval = 1000 * 16 / report.recommendation.samples_per_s - (rec.times.copy_ms_mean or 0.0)
    assert finding is not None and f"≥ {interval:.1f} ms at batch size 16" in finding.evidence


def test_old_runs_without_the_new_figures_still_diagnose() -> None:
    data = json.loads((DATA / "sweep" / "latency.json").read_text())
    verdict, findings = diagnose(Report.from_dict(data))
    assert verdict in PRIMARY_KINDS and findings


def test_recommendation_says_how_close_it_gets_to_the_cpu_ceiling() -> None:
    from dataprof.decide.sweep import decide
    from dataprof.render.documents import ConsoleRenderer

    render = ConsoleRenderer().render

    cpu = decide(run("cpu_bound"))
    assert cpu.recommendation is not None and 0.8 < (cpu.recommendation.cpu_ceiling_share or 0) <= 1.05
    assert "of what 2 CPUs can do" in render(cpu)
    assert cpu.to_dict()["best"]["cpu_ceiling_samples_per_s"] == cpu.recommendation.cpu_ceiling_samples_per_s
    io = decide(run("io_bound")).recommendation
    assert io is not None and (io.cpu_ceiling_share or 1) < 0.5


def test_transfer_bound_weighs_the_copy_against_each_part_of_the_wait() -> None:
    from dataprof.results.trial import Percentiles

    report = run("transfer_bound")
    rec = next(t for t in report.trials if report.recommendation and t.config == report.recommendation.config)
    copy = rec.times.copy_ms_mean or 0.0

    def waiting(total: float, busy: float) -> Report:
        return with_trials(report, lambda t: t.replaced(
            wait_ms=Percentiles(p50=total, p95=total, max=total, mean=total), wait_cpu_ms_mean=busy)
            if t is rec else t)

    # Longer than the copy, but mostly the main thread receiving those bytes: still the copy's verdict.
    assert step.transfer_bound(waiting(copy + 1.5, copy - 0.5), TH) is not None
    # Longer than the copy and mostly idle (workers too slow): not transfer-bound.
    assert step.transfer_bound(waiting(copy + 1.5, 0.5), TH) is None


def test_paddle_run_rediagnoses_with_its_autotune_row() -> None:
    from dataprof.decide.sweep import decide

    report = decide(run("paddle_latency"))
    assert report.environment.framework == "paddle"
    assert report.recommendation is not None and report.recommendation.config.framework == "paddle"
    row = next(r for r in report.rules_of_thumb if r.rule == "Paddle autotune")
    assert report.autotune is not None and row.config.num_workers == report.autotune.num_workers
    assert row.samples_per_s is not None and row.recommended_speedup is not None and row.recommended_speedup > 1


def test_single_process_when_workers_never_started() -> None:
    report = run("paddle_latency")
    assert rules.single_process(report, Thresholds()) is None
    macos = dataclasses.replace(report, environment=dataclasses.replace(report.environment, platform="macOS-14-arm64"))
    alone = with_trials(macos, lambda t: dataclasses.replace(t, worker_processes=0))
    finding = rules.single_process(alone, Thresholds())
    assert finding is not None and finding.severity == "warning"
    assert "forces num_workers=0 on macOS and Windows (macOS-14-arm64)" in finding.evidence


def test_paddle_shm_risk_offers_use_shared_memory_false_with_its_measured_cost() -> None:
    report = run("paddle_latency")
    assert rules.shm_risk(report, Thresholds()) is None
    small = dataclasses.replace(report, environment=dataclasses.replace(report.environment, shm_free_bytes=2 * 10**6))
    finding = rules.shm_risk(small, Thresholds())
    assert finding is not None and finding.severity == "critical"
    assert "use_shared_memory=False" in finding.recommendation
    assert "measured here: w64 pf2 persist no-shm" in finding.recommendation


def test_short_epochs_are_their_own_verdict_never_io() -> None:
    report = run("short_epoch")
    finding = primary.short_epoch(report, TH)
    assert finding is not None and "an epoch is 2 batches (16 samples), fewer than the 8" in finding.evidence
    assert diagnose(report)[0] == "short_epoch"
    assert all(primary.short_epoch(run(name), TH) is None for name in ("io_bound", "cpu_bound", "worker_startup"))


def test_a_busy_machine_is_named_and_its_cpus_are_not_counted_twice() -> None:
    from dataprof.decide.diagnose.machine import busy_machine
    from dataprof.decide.sweep import decide
    from dataprof.render.documents import ConsoleRenderer

    render = ConsoleRenderer().render

    quiet = decide(run("cpu_bound"))
    assert busy_machine(quiet, TH) is None
    loaded = decide(with_trials(run("cpu_bound"), lambda t: t.replaced(foreign_cpu_percent=90.0)))
    finding = busy_machine(loaded, TH)
    assert finding is not None and finding.severity == "warning"
    assert finding.evidence.startswith("other processes used 0.9 of 2 usable CPUs during the sweep (the median")
    assert any(f.id == "busy_machine" for f in loaded.findings)
    assert quiet.recommendation is not None and loaded.recommendation is not None
    # the loader had 1.1 CPUs, not 2: its ceiling is that much lower and the text says whose CPUs
    assert loaded.recommendation.cpu_ceiling_samples_per_s == pytest.approx(
        quiet.recommendation.cpu_ceiling_samples_per_s * 1.1 / 2)
    assert "of what the 1.1 of 2 CPUs other processes left can do" in render(loaded)
    little = decide(with_trials(run("cpu_bound"), lambda t: t.replaced(foreign_cpu_percent=10.0)))
    assert busy_machine(little, TH) is None and little.recommendation == quiet.recommendation


def test_a_loader_whose_batch_sampler_makes_its_batches_is_judged_by_the_mean_batch_its_trials_delivered() -> None:
    from dataprof.render.documents import ConsoleRenderer
    from dataprof.results.environment import UserLoader

    report = run("io_bound")
    assert report.dataset is not None
    buckets = UserLoader(cls="torch.utils.data.dataloader.DataLoader", batch_sampler="Buckets")
    report = dataclasses.replace(  # the probe's first batch held 200 samples; the windows' batches 5 on average
        report, dataset=dataclasses.replace(report.dataset, loader=buckets, batch_samples=200),
        settings=dataclasses.replace(report.settings, batch_size=200, batch_size_given=False),
        trials=tuple(dataclasses.replace(t, samples=5 * t.batches) if t.batches else t for t in report.trials))
    finding = primary.io_bound(report, TH)
    assert report.recommendation is not None
    rec = next(t for t in report.trials if t.config == report.recommendation.config)
    interval = 1000 * 5 / report.recommendation.samples_per_s - (rec.times.copy_ms_mean or 0.0)
    assert finding is not None and f"≥ {interval:.1f} ms at batch size 5" in finding.evidence
    assert "batches of 5 samples on average" in ConsoleRenderer(200).render(report)
    given = dataclasses.replace(report, settings=dataclasses.replace(report.settings, batch_size_given=True))
    assert "at batch size 200" in (primary.io_bound(given, TH) or finding).evidence


def test_thread_workers_the_gil_caps_are_cpu_bound_at_the_cpus_it_leaves_them_not_waiting_on_storage() -> None:
    report = run("threads_win")  # t128 pf2 recommended, 0.9 of 2 CPUs: a sleep dataset's threads release the GIL
    assert diagnose(report)[0] == "io_bound"
    held = dataclasses.replace(report.settings.space, gil_release=0.1, gil_release_high=0.15)
    capped = dataclasses.replace(report, settings=dataclasses.replace(report.settings, space=held))
    finding = primary.cpu_bound(capped, TH)  # 1 / (1 - 0.1) = 1.1 CPUs at most, and the threads use 0.9
    assert finding is not None and diagnose(capped)[0] == "cpu_bound"
    assert "its threads take turns at the GIL: a sample releases it 10% of its time, so the threads of one process " \
           "can use at most 1.1 CPUs" in finding.evidence and "so 1.1 CPUs can load at most" in finding.evidence
    assert finding.recommendation.startswith("The GIL, not the CPUs, caps these threads: load in worker processes")
    untold = dataclasses.replace(held, gil_release_high=0.7)  # other processes kept the measure's threads waiting
    assert diagnose(dataclasses.replace(capped, settings=dataclasses.replace(report.settings, space=untold)))[0] \
        == "io_bound"

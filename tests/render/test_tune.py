"""tune's answer in words: the loader-only sweep's pick beside what the training made of it."""

from __future__ import annotations

import dataclasses

from dataprof.decide.tune import decide_tune
from dataprof.render.tune import answer_lines
from dataprof.results.trial import Percentiles
from dataprof.results.tune import LoaderSweep, TunedLoader, TuneRank, TuneReport, TuneTrial
from dataprof.results.vocabulary import TrialStatus

LOADER = TunedLoader("train.py:46", "DataLoader", 32, {"num_workers": 0})


def run(config: dict[str, object], rate: float, role: str = "candidate") -> TuneTrial:
    return TuneTrial(config, TrialStatus.OK, role, iterations_per_s=rate, step_ms=Percentiles(40.0, 50.0))


def tuned(*trials: TuneTrial, swept: LoaderSweep | None) -> TuneReport:
    return decide_tune(TuneReport("0", ("train.py",), LOADER, trials, 60.0, loader_sweep=swept))


def test_the_sweep_s_pick_is_placed_among_the_training_s_runs() -> None:
    swept = LoaderSweep("train.py:make_loader", {"images": 256}, 41.2, {"num_workers": 2}, "w2 pf2 persist", 526.0)
    trials = (run({}, 8.8, "current"), run({}, 23.8, "headspace"), run({"num_workers": 2}, 9.1, "sweep"),
              run({}, 8.6, "current"), run({}, 23.9, "headspace"), run({"num_workers": 2}, 9.0, "sweep"),
              run({}, 8.7, "current"))
    lines = answer_lines(tuned(*trials, swept=swept))
    assert lines[0] == "at train.py:46 (DataLoader): keep your settings"  # w2 is no faster beyond 10%, and dearer
    assert lines[1].startswith("your own config is as fast as the fastest (num_workers=2: yours at least ")
    assert lines[2] == "data loading costs your training 64% (62% to 65%) of its speed now"
    assert lines[-1] == ("the loader alone (dataprof sweep train.py:make_loader --arg images=256 --step-ms 41.2) picks "
                         "w2 pf2 persist "
                         "(526 samples/s beside a dummy model); in your training it ranks 1 of 2, +4.0% against "
                         "the recommended")
    unsure = answer_lines(tuned(*trials[:3], run({}, 7.5, "current"), run({"num_workers": 2}, 9.5, "sweep"),
                                swept=swept))
    assert unsure[0].startswith("at train.py:46 (DataLoader): cannot tell on this machine: ")
    assert unsure[-1].endswith("in your training it ranks 1 of 2")


def test_a_pick_the_training_never_ran_or_could_not_set_is_said() -> None:
    never = LoaderSweep("train.py:make_loader", {}, 41.2, {"num_workers": 2}, "w2", 526.0)
    report = tuned(run({}, 8.8, "current"), swept=never)
    assert answer_lines(report)[-1].endswith("not run in your training (the budget ran out first)")
    threads = dataclasses.replace(never, config=None, label="t4", error="its pick loads in threads")
    assert answer_lines(tuned(run({}, 8.8, "current"), swept=threads))[-1].endswith("picks t4: its pick loads in "
                                                                                   "threads")


def test_the_gpu_column_shows_only_when_the_training_used_a_gpu() -> None:
    import io

    from rich.console import Console

    from dataprof.render.tune import trials_table

    def text(*trials: TuneTrial) -> str:
        buffer = io.StringIO()
        Console(file=buffer, width=150, color_system=None).print(trials_table(tuned(*trials, swept=None)))
        return buffer.getvalue()

    assert "GPU" not in text(run({}, 8.8, "current"))
    on_gpu = dataclasses.replace(run({}, 8.8, "current"), gpu_util_percent=37.0)
    assert "GPU" in text(on_gpu) and "37%" in text(on_gpu)


def test_the_waits_at_later_epoch_starts_show_beside_the_steady_wait_where_a_run_saw_a_second_epoch() -> None:
    import io

    from rich.console import Console

    from dataprof.render.tune import trials_table

    def text(*trials: TuneTrial) -> str:
        buffer = io.StringIO()
        Console(file=buffer, width=150, color_system=None).print(trials_table(tuned(*trials, swept=None)))
        return buffer.getvalue()

    assert "starts" not in text(run({}, 8.8, "current"))  # one epoch a run: no column
    restarting = dataclasses.replace(run({}, 4.1, "current"), data_wait_fraction=0.11, warmup_wait_fraction=0.76)
    row = next(line for line in text(restarting, run({}, 33.0, "headspace")).splitlines() if "yours" in line)
    assert "11%" in row and "76%" in row  # workers started anew at each short epoch: 11% steady, 76% at starts
    narrow = io.StringIO()  # on 80 columns a config's words are broken across lines, never cut short
    Console(file=narrow, width=80, color_system=None).print(trials_table(tuned(
        restarting, run({}, 33.0, "headspace"), run({"num_workers": 16, "persistent_workers": True}, 6.0),
        swept=None)))
    assert "…" not in narrow.getvalue() and "persistent_" in narrow.getvalue()


def test_threads_recommended_are_said_as_the_loader_that_runs_them() -> None:
    for threads, how in (("torchdata.nodes", "the torchdata.nodes pipeline of docs/threads.md"),
                         ("torch", 'worker_method="thread"')):
        loader = dataclasses.replace(LOADER, settings={"num_workers": 2}, threads=threads)
        report = decide_tune(TuneReport("0", ("train.py",), loader, (
            run({}, 10.0, "current"), run({}, 30.0, "headspace"), run({"worker_kind": "thread", "num_workers": 4},
                                                                      20.0),
            run({}, 10.5, "current"), run({"worker_kind": "thread", "num_workers": 4}, 21.0)), 60.0))
        assert answer_lines(report)[0] == ("at train.py:46 (DataLoader): num_workers=2 → 4; its workers as threads "
                                           f"of the training process ({how})")


def test_runs_of_several_ranks_show_each_rank_s_data_wait() -> None:
    import io

    from rich.console import Console

    from dataprof.render.tune import trials_table

    def ranked(config: dict[str, object], role: str, waits: tuple[float, float]) -> TuneTrial:
        return dataclasses.replace(run(config, 20.0, role), data_wait_fraction=max(waits), ranks=tuple(
            TuneRank(n, 20.0, w, 40.0)
            for n, w in enumerate(waits)))

    def shown(report: TuneReport) -> str:
        buffer = io.StringIO()
        Console(width=160, file=buffer, color_system=None).print(trials_table(report))
        return buffer.getvalue()

    text = shown(tuned(ranked({}, "current", (0.12, 0.61)), ranked({}, "headspace", (0.0, 0.01)), swept=None))
    assert "by rank" in text and "12% / 61%" in text and "0% / 1%" in text
    assert "by rank" not in shown(tuned(run({}, 8.8, "current"), swept=None))  # one process: no such column

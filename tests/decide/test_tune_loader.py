"""The loader tune tunes, decided from the script's first run: what it may try there, and the notes saying what it
does not try and why."""

from __future__ import annotations

import dataclasses

from dataprof.decide.tune.loader import ranks_notes, tuning
from dataprof.results.tune import TuneReport
from tests.conftest import run_report

METHODS = ("fork", "spawn", "forkserver")


def tuned(**loader: object) -> TuneReport:
    run = run_report(0.3)
    found = dataclasses.replace(run.loaders[0], **loader)
    return tuning(TuneReport("0", ("train.py",), None, (), 0.0), dataclasses.replace(run, loaders=(found,)), found,
                  try_fork=False, start_methods=METHODS, threads="torch")


def test_a_start_method_the_script_chose_is_kept_and_said_unless_fork_is_asked_for() -> None:
    free = tuned()
    assert free.loader is not None and free.loader.start_methods == METHODS and free.notes == ()
    chosen = tuned(start_method="spawn", start_method_chosen=True)
    assert chosen.loader is not None and chosen.loader.start_methods == ()
    assert chosen.notes == ("your script starts its workers by spawn, kept: a start method chosen in the script is "
                            "often a library's need (not fork-safe: h5py, LMDB, tokenizers, CUDA in the dataset); "
                            "fork, which starts workers faster, is not tried (--try-fork tries it)",)
    run = run_report(0.3)
    found = dataclasses.replace(run.loaders[0], start_method="spawn", start_method_chosen=True)
    asked = tuning(TuneReport("0", ("train.py",), None, (), 0.0), dataclasses.replace(run, loaders=(found,)), found,
                   try_fork=True, start_methods=METHODS, threads="torch")
    assert asked.loader is not None and asked.loader.start_methods == METHODS and asked.notes == ()


def test_threads_are_tried_only_on_a_map_style_dataset_whose_loader_the_script_builds_itself() -> None:
    plain = tuned()
    assert plain.loader is not None and plain.loader.threads == "torch"
    stream = tuned(iterable=True)
    assert stream.loader is not None and stream.loader.threads is None and stream.notes == ()
    built = tuned(built_by=("transformers.trainer:Trainer.get_train_dataloader",))
    assert built.loader is not None and built.loader.threads is None
    assert built.notes == ("threads are not tried: a library builds the loader "
                           "(transformers.trainer:Trainer.get_train_dataloader), and a thread loader would replace it "
                           "in your code",)


def test_a_paddle_loader_is_tuned_by_its_knobs_alone() -> None:
    paddle = tuned(framework="paddle", start_method="spawn", start_method_chosen=True)
    assert paddle.loader is not None and paddle.loader.start_methods == () and paddle.loader.threads is None
    assert paddle.notes == ()


def test_runs_over_ranks_or_nodes_say_what_their_figure_is() -> None:
    assert ranks_notes(1, 1) == ()
    one_machine = ranks_notes(2, 1)
    assert one_machine[0].startswith("each run is one job of 2 rank(s) on this machine, every rank with the same knobs")
    assert "on each of 3 nodes, started together" in ranks_notes(1, 3)[0]
    assert one_machine[1] == "no loader-only sweep to compare: the training runs as several ranks, the loader sweep " \
                             "as one"


def test_a_knob_the_run_found_set_outside_its_own_fields_is_the_script_s_setting_not_a_change_to_make() -> None:
    from dataprof.decide.tune.refine import as_changed
    from dataprof.results.knobs import KnobValues

    unordered = tuned(other_knobs={"in_order": False})
    assert unordered.loader is not None and unordered.loader.settings["in_order"] is False
    picked = KnobValues(num_workers=4, in_order=False)  # the loader sweep's pick, say
    assert as_changed(picked, unordered.loader.settings) == {"num_workers": 4}

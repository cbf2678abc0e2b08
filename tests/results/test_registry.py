"""The knob records are the one place that knows a knob: a knob registered here, in the test alone, reaches every
command's reading and writing of knobs; and the knob fields of the data classes are the registry's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from dataprof.results.codec import decode, encode
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import KNOBS, REGISTRY, Knob, record_of
from dataprof.results.request import SweepOptions
from dataprof.results.space import SearchSpace
from dataprof.results.text import parse_current, parse_knob, parse_knobs

TIMEOUT = Knob("timeout", ("torch",), "--timeout", "ints", "timeouts", True,
               lambda c: None if c.value("timeout") is None else f"to{c.value('timeout')}",
               "PyTorch: timeout values, seconds a batch may take from the workers.", json_rank=9, flag_rank=9,
               minimum=0, loader_default=0, attribute=True)
"""The DataLoader's ``timeout``, which dataprof does not sweep: a knob with nothing but its record."""


@pytest.fixture
def timeout() -> Iterator[Knob]:
    with REGISTRY.added(TIMEOUT) as knob:
        yield knob


def test_a_registered_knob_parses_from_override_and_current(timeout: Knob) -> None:
    assert parse_knobs("num_workers=2,timeout=5", "--override") == {"num_workers": 2, "timeout": 5}
    assert parse_current("num_workers=2,timeout=5").value("timeout") == 5
    assert parse_knob(timeout, "5,10") == (5, 10)
    with pytest.raises(Exception, match="--current timeout: -1 is below the minimum of 0"):
        parse_current("num_workers=2,timeout=-1")


def test_a_registered_knob_is_labelled_and_written_and_read_back_in_json(timeout: Knob) -> None:
    config = parse_current("num_workers=2,timeout=5")
    assert config.label() == "w2 pf2 respawn to5"
    assert "timeout" in KNOBS["torch"]
    document = json.loads(json.dumps(config.to_dict()))
    assert document["timeout"] == 5
    assert LoaderConfig.from_dict(document) == config
    assert LoaderConfig.from_dict({**document, "timeout": None}) != config


def test_a_registered_knob_is_read_off_a_users_loader_and_set_on_a_trials(timeout: Knob) -> None:
    from torch.utils.data import DataLoader

    from dataprof.backends.loaders import LoaderTemplate, current_config
    from dataprof.backends.torch_backend import TorchBackend

    data = list(range(8))
    assert current_config(DataLoader(data, num_workers=2, timeout=7), "torch").value("timeout") == 7
    assert current_config(DataLoader(data, num_workers=0), "torch").value("timeout") is None  # needs workers

    config = SearchSpace(workers=(2,)).config(2, timeout=5)
    assert config.dataloader_kwargs()["timeout"] == 5
    loader, _ = TorchBackend().build_loader(data, config, 4, None, False, False)
    assert loader.timeout == 5
    rebuilt = LoaderTemplate.of(DataLoader(data, batch_size=4, num_workers=2, timeout=7)).build(config)
    assert rebuilt.timeout == 5


def test_a_registered_knob_reaches_a_runs_override(timeout: Knob) -> None:
    from torch.utils.data import DataLoader

    from dataprof.measure.watch.changes import overridden

    loader = DataLoader.__new__(DataLoader)
    values, _ = overridden(DataLoader.__init__, loader, (list(range(8)),), {"num_workers": 2},
                           parse_knobs("timeout=5", "--override"))
    assert values["timeout"] == 5 and values["num_workers"] == 2
    values, _ = overridden(DataLoader.__init__, loader, (list(range(8)),), {}, {"timeout": 5})
    assert "timeout" not in values  # no workers: a knob that needs them is left at the loader's default


def test_a_registered_knob_is_carried_by_a_run_and_a_tune_trial_and_read_back_in_its_order(timeout: Knob) -> None:
    from dataprof.results.knobs import KnobValues
    from dataprof.results.run import RunChanges
    from dataprof.results.tune import TuneReport, TuneTrial
    from dataprof.results.vocabulary import TrialStatus

    settings = KnobValues(num_workers=2, timeout=0)
    changes = (settings | {"timeout": 5, "prefetch_factor": 4}).apart_from(settings)
    assert list(changes.items()) == [("timeout", 5), ("prefetch_factor", 4)]
    assert decode(RunChanges, json.loads(json.dumps(encode(RunChanges(changes))))).knobs == changes
    trial = TuneTrial({"timeout": 5, "num_workers": 2}, TrialStatus.OK, node_knobs={"1": {"timeout": 1}})
    assert isinstance(trial.config, KnobValues) and isinstance(trial.node_knobs["1"], KnobValues)
    written = json.loads(TuneReport("0", (), None, (trial,), 1.0).to_json())
    assert list(written["trials"][0]["config"]) == ["timeout", "num_workers"]
    assert TuneReport.from_dict(written).trials[0] == trial


def test_a_knob_no_record_knows_is_refused_where_knobs_are_carried_and_left_out_of_a_newer_document() -> None:
    from dataprof.api import run
    from dataprof.errors import UsageError
    from dataprof.results.knobs import KnobValues
    from dataprof.results.run import RunChanges
    from dataprof.results.tune import TuneReport, TuneTrial
    from dataprof.results.vocabulary import TrialStatus

    with pytest.raises(ValueError, match="no loader knob named timeout"):
        KnobValues(num_workers=2, timeout=5)
    with pytest.raises(ValueError, match="timeout"):
        RunChanges({"timeout": 5})
    with pytest.raises(UsageError, match="--override: no loader knob named timeout"):
        run("train.py", override={"timeout": 5})  # refused before anything runs
    written = json.loads(TuneReport("0", (), None, (TuneTrial({"num_workers": 2}, TrialStatus.OK),), 1.0).to_json())
    written["trials"][0]["config"]["timeout"] = 5  # a knob a newer dataprof knows
    assert TuneReport.from_dict(written).trials[0].config == {"num_workers": 2}


def test_thread_workers_are_passed_only_the_knobs_their_records_say_they_take(timeout: Knob) -> None:
    import dataclasses
    from typing import Any

    from dataprof.measure.watch.changes import overridden

    class Threaded:  # a DataLoader that takes worker_method, as PyTorch's own thread workers do
        def __init__(self, dataset: Any, num_workers: int = 0, worker_method: str = "multiprocessing",
                     **rest: Any) -> None:
            pass

    knobs = {"worker_kind": "thread", "num_workers": 2, "timeout": 5, "prefetch_factor": 4}
    values, _ = overridden(Threaded.__init__, Threaded.__new__(Threaded), ([],), {}, knobs)
    assert "timeout" not in values and values["prefetch_factor"] == 4 and values["worker_method"] == "thread"
    with REGISTRY.added(dataclasses.replace(TIMEOUT, name="watchdog_s", threads=True)):
        values, _ = overridden(Threaded.__init__, Threaded.__new__(Threaded), ([],), {}, {**knobs, "watchdog_s": 9})
    assert values["watchdog_s"] == 9 and "timeout" not in values


def test_a_registered_knob_the_script_sets_back_after_construction_is_named(timeout: Knob) -> None:
    from torch.utils.data import DataLoader

    from dataprof.measure.watch.changes import lost_knobs

    loader = DataLoader(list(range(8)), num_workers=2, timeout=5)
    assert lost_knobs(loader, {"num_workers": 2, "timeout": 5}) == {}
    loader.timeout = 0  # the script's own line after the loader was built
    assert lost_knobs(loader, {"num_workers": 2, "timeout": 5}) == {"timeout": 0}


def test_the_registry_is_as_it_was_after_the_block() -> None:
    with REGISTRY.added(TIMEOUT):
        assert record_of("timeout") is TIMEOUT
    with pytest.raises(KeyError):
        record_of("timeout")
    assert "timeout" not in KNOBS["torch"]


def test_the_knob_fields_of_the_configs_the_spaces_and_the_options_are_the_registrys() -> None:
    config_fields = {f.name for f in dataclasses.fields(LoaderConfig)} - {"num_workers", "framework", "others"}
    assert config_fields == {knob.name for knob in REGISTRY}
    space_fields = {f.name for f in dataclasses.fields(SearchSpace)}
    option_fields = {f.name for f in dataclasses.fields(SweepOptions)}
    assert {knob.space_key for knob in REGISTRY} <= space_fields & option_fields
    assert sorted(knob.json_rank for knob in REGISTRY) == list(range(len(REGISTRY)))
    assert sorted(knob.flag_rank for knob in REGISTRY) == list(range(len(REGISTRY)))
    for knob in REGISTRY:
        assert knob.values != "words" or knob.choices, knob.name
        assert knob.minimum is None or knob.values == "ints", knob.name


def test_the_knobs_a_run_reports_are_the_loader_record_s_fields_and_reach_the_loader_tune_tunes() -> None:
    from dataprof.decide.tune import loader_of
    from dataprof.results.run import LoaderRun
    from tests.conftest import run_report

    reported = {knob.reported for knob in REGISTRY if knob.reported}
    assert reported <= {f.name for f in dataclasses.fields(LoaderRun)}
    loader = dataclasses.replace(run_report(0.4).loaders[0], start_method="spawn", worker_kind="thread")
    assert loader_of(loader).settings == {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True,
                                          "pin_memory": False, "multiprocessing_context": "spawn",
                                          "worker_kind": "thread"}  # a knob's record name, not the run's key
    # worker processes are the default: the knob that picks the loader is named only away from it
    assert "worker_kind" not in loader_of(dataclasses.replace(loader, worker_kind="process")).settings
    with REGISTRY.added(dataclasses.replace(TIMEOUT, reported="epochs")):  # a run reporting a knob in a field
        assert loader.knobs()["timeout"] == loader.epochs


def test_a_registered_knob_reaches_a_sweeps_decision_its_json_and_both_renderers(timeout: Knob) -> None:
    from dataprof.decide.documents import decide_again
    from dataprof.render.documents import ConsoleRenderer, HtmlRenderer
    from dataprof.results.load import load_document
    from dataprof.results.sweep import Report
    from tests.conftest import DATA

    saved = load_document(DATA / "sweep" / "latency.json")
    assert isinstance(saved, Report)
    fastest = max(saved.trials, key=lambda t: t.samples_per_s or 0.0)
    with_timeout = LoaderConfig.of(**{**fastest.config.dataloader_kwargs(), "timeout": 5})
    trials = tuple(dataclasses.replace(t, config=with_timeout) if t is fastest else t for t in saved.trials)
    report = decide_again(dataclasses.replace(saved, trials=trials, search_steps=()))
    assert isinstance(report, Report) and report.recommendation is not None
    assert report.recommendation.config.value("timeout") == 5
    back = Report.from_dict(json.loads(report.to_json()))
    assert back.recommendation is not None and back.recommendation.config == with_timeout
    assert "to5" in ConsoleRenderer(200).render(report) and "to5" in HtmlRenderer().render(report)


def test_a_registered_knob_without_a_field_is_set_on_a_config_as_one_with_a_field_is(timeout: Knob) -> None:
    config = LoaderConfig(2, prefetch_factor=2)
    assert config.with_value("timeout", 5).value("timeout") == 5 and config.with_value("timeout", 5).label() == \
        "w2 pf2 respawn to5"
    assert config.with_value("timeout", 5).with_value("timeout", None) == config
    assert config.with_value("prefetch_factor", 4) == LoaderConfig(2, prefetch_factor=4)


def test_a_registered_knob_the_script_sets_is_read_off_its_loader_by_a_run_and_carried_to_tune(timeout: Knob) -> None:
    from torch.utils.data import DataLoader

    from dataprof.measure.watch.events import Factory
    from dataprof.measure.watch.recorder import Recorder
    from dataprof.measure.watch.sites import Origin
    from dataprof.results.run import LoaderRun

    class Sink:
        def send(self, message: object) -> None: ...

    recorder = Recorder(Sink(), None, None)  # type: ignore[arg-type]
    built = recorder.loaders[recorder.register(DataLoader(list(range(8)), num_workers=2, timeout=5),
                                               Origin(None, "train.py:3"), Factory())]
    figures = {"batches": 2, "epochs": 1, "steady_batches": 1, "samples_per_s": None, "data_wait_fraction": None,
               "wait_ms": None, "step_ms": None}
    run = decode(LoaderRun, json.loads(json.dumps(encode(decode(LoaderRun, {**encode(built), **figures})))))
    assert run.other_knobs == {"timeout": 5} and run.knobs()["timeout"] == 5


SNAPSHOTS = Knob("snapshot_frequency", ("torch",), "--snapshot-frequency", "ints", "snapshot_frequencies", True,
                 lambda c: None, "torchdata.nodes: how often the mapper snapshots its state.", json_rank=9,
                 flag_rank=9, minimum=1, loader_default=1, node="ParallelMapper.snapshot_frequency", threads=True)
"""A knob only a ``torchdata.nodes`` pipeline has: its record places it in the pipeline and nothing else does."""


def test_a_registered_knob_placed_in_a_nodes_pipeline_is_set_and_read_there_by_its_record_alone() -> None:
    from dataprof.measure.watch.changes import nodes_knobs, override_nodes
    from dataprof.measure.watch.recorder import loader_knobs
    from tests.measure.watch.test_changes import nodes_loader

    with REGISTRY.added(SNAPSHOTS):
        loader = nodes_loader()
        override_nodes(loader, {"num_workers": 2, "snapshot_frequency": 5})
        assert (loader.root.source.num_workers, loader.root.source.snapshot_frequency) == (2, 5)
        assert nodes_knobs(loader)["snapshot_frequency"] == 5
        assert loader_knobs(loader, None)["other_knobs"] == {"snapshot_frequency": 5}
        assert sorted(i for batch in loader for i in batch) == list(range(0, 32, 2))


def test_a_knob_a_loader_holds_as_no_value_the_knob_takes_is_read_as_not_known() -> None:
    from torch.utils.data import DataLoader

    from dataprof.backends.loaders import current_config

    loader = DataLoader(list(range(8)), num_workers=2)
    loader.prefetch_factor, loader.pin_memory = "many", "yes"  # a subclass's own attributes of the names
    config = current_config(loader, "torch")
    assert (config.prefetch_factor, config.pin_memory, config.num_workers) == (None, None, 2)

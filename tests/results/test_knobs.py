"""The knob registry: every layer's view of a knob derives from its one record."""

from __future__ import annotations

import dataclasses

import click
import pytest

from dataprof.api import _knobs
from dataprof.cli import main
from dataprof.errors import UsageError
from dataprof.results.codec import decode, encode
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import KNOBS, REGISTRY
from dataprof.results.request import SweepOptions
from dataprof.results.space import SearchSpace


def test_each_knob_is_an_option_of_sweep_and_a_keyword_of_the_api() -> None:
    sweep = main.commands["sweep"] if isinstance(main, click.Group) else None
    assert sweep is not None
    options = {opt for param in sweep.params for opt in param.opts}
    for knob in REGISTRY:
        assert knob.flag in options
        assert knob.space_key in _knobs({knob.keyword_name: None})


def test_the_api_reads_a_knob_as_its_option_does_and_refuses_a_word_that_is_no_knob() -> None:
    given = _knobs({"start_method": "forkserver,spawn", "in_order": [True, False], "prefetch_factor": 4})
    assert given["start_methods"] == ("forkserver", "spawn") and given["in_order"] == (True, False)
    assert given["prefetch_factors"] == (4,) and given["persistent_workers"] == (True,)  # the option's default
    with pytest.raises(UsageError, match="prefetch is not a keyword of it; its knobs are prefetch_factor"):
        _knobs({"prefetch": 2})


def test_a_config_s_json_keeps_the_documents_order_and_its_call_lists_the_knobs_in_the_registry_s() -> None:
    assert KNOBS["torch"] == ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "in_order",
                              "multiprocessing_context")
    assert KNOBS["paddle"] == ("num_workers", "use_shared_memory", "prefetch_factor", "use_buffer_reader",
                               "persistent_workers", "reader_buffer_size")
    config = LoaderConfig(4, True, 2, True, in_order=False, multiprocessing_context="spawn")
    assert list(config.to_dict()) == [*KNOBS["torch"], "worker_kind"]
    assert list(config.dataloader_kwargs()) == ["num_workers", "prefetch_factor", "persistent_workers",
                                                "pin_memory", "in_order", "multiprocessing_context"]
    assert config.label() == "w4 pf2 persist pin unordered spawn"
    paddle = LoaderConfig(2, False, 2, False, False, False, "paddle")
    assert paddle.label() == "w2 pf2 respawn no-shm no-buf"
    assert LoaderConfig(0, pin_memory=True, prefetch_factor=None).dataloader_kwargs() == {"num_workers": 0,
                                                                                           "pin_memory": True}


def test_the_space_reads_back_each_knob_s_values_by_its_key() -> None:
    space = SearchSpace(workers=(0, 2), prefetch_factors=(2, 4), pin_memory=(True, False), in_order=(True, False),
                        start_methods=("fork", "spawn"), worker_kinds=("process", "thread"))
    data = encode(space)
    assert [key for key in data if key in {knob.space_key for knob in REGISTRY}] == \
        [knob.space_key for knob in REGISTRY if "torch" in knob.frameworks]  # each of its framework's, in order
    assert decode(SearchSpace, {**data, "framework": "torch"}) == space
    paddle = encode(dataclasses.replace(space, framework="paddle", reader_buffer_sizes=(2, 4)))
    assert [key for key in paddle if key in {knob.space_key for knob in REGISTRY}] == \
        [knob.space_key for knob in REGISTRY if "paddle" in knob.frameworks] and "start_method" not in paddle


def test_a_plain_knob_is_its_record_its_fields_and_nothing_else() -> None:
    """Paddle's ``reader_buffer_size`` came as a record, a LoaderConfig field, a SearchSpace field and a
    SweepOptions field: its option, API keyword, label word, loader keyword, JSON key, grid and tuning follow."""
    from dataprof.decide.search.grid import grid_configs
    from dataprof.decide.settings import settings_for
    from dataprof.results.environment import CpuBudget
    from dataprof.results.request import LoadOptions, SweepRequest

    given = _knobs({"reader_buffer_size": "2,8"})
    assert given["reader_buffer_sizes"] == (2, 8)
    request = SweepRequest(LoadOptions("x.py:D", framework="paddle"), SweepOptions(workers=(0, 2), **given))
    space = dataclasses.replace(settings_for(request, CpuBudget(usable=2, affinity=2, quota=None, cpu_count=2),
                                             8 << 30).space, framework="paddle")
    configs = grid_configs(space)
    assert {c.reader_buffer_size for c in configs if c.num_workers} == {2, 8}
    config = next(c for c in configs if c.reader_buffer_size == 8 and c.num_workers == 2)
    assert "rb8" in config.label() and config.dataloader_kwargs()["reader_buffer_size"] == 8
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert ("reader_buffer_size", (2, 8)) in space.stepped_knobs()
    assert "reader_buffer_size" not in SearchSpace(workers=(0,), framework="paddle").config(2).dataloader_kwargs()
    with pytest.raises(UsageError, match="paddle.io.DataLoader only"):
        settings_for(SweepRequest(LoadOptions("x.py:D", framework="torch"), SweepOptions(**given)),
                     CpuBudget(usable=2, affinity=2, quota=None, cpu_count=2), 8 << 30)


def test_knobs_are_worded_one_way_in_a_dataloader_call_s_order() -> None:
    from dataprof.results.knobs import KnobValues, changes_label, knob_words

    changes = KnobValues({"multiprocessing_context": "fork", "prefetch_factor": 4, "num_workers": 2})
    assert knob_words(changes) == "num_workers=2, prefetch_factor=4, multiprocessing_context='fork'"
    assert changes_label(KnobValues()) == "as the script has it"
    assert changes_label(KnobValues(num_workers=2), {"2": KnobValues(num_workers=0), "1": KnobValues(num_workers=1)}) \
        == "num_workers=2; node 1: num_workers=1; node 2: num_workers=0"


def test_some_knobs_values_answer_as_a_config_does_what_the_loader_has() -> None:
    from dataprof.results.knobs import KnobValues

    script = KnobValues({"num_workers": 4, "worker_kind": "thread"})
    assert script.threads and LoaderConfig(4, worker_kind="thread").threads and not KnobValues(num_workers=4).threads
    # unset, a knob is the loader's own default, as its record says
    assert script.in_effect("prefetch_factor") == 2 and script.in_effect("persistent_workers") is False
    assert KnobValues(prefetch_factor=8).in_effect("prefetch_factor") == 8
    assert KnobValues().in_effect("num_workers") == 0
    # read by name, as a config is
    assert script.value("worker_kind") == LoaderConfig(4, worker_kind="thread").value("worker_kind") == "thread"
    assert KnobValues().value("pin_memory") is None


def test_a_config_names_the_knobs_it_changes_from_another_in_its_json_s_order() -> None:
    mine = LoaderConfig(4, prefetch_factor=2, persistent_workers=True)
    assert LoaderConfig(0).changed_from(mine) == ("num_workers", "prefetch_factor", "persistent_workers")
    assert LoaderConfig(8, prefetch_factor=2, persistent_workers=True).changed_from(mine) == ("num_workers",)
    assert mine.as_threads().changed_from(mine) == ("persistent_workers", "worker_kind")
    assert mine.changed_from(mine) == () and LoaderConfig(4).names() == (*KNOBS["torch"], "worker_kind")

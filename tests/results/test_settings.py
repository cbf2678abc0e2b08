"""Settings as data: a DataLoader config, the search space and the worker ladders."""

from __future__ import annotations

from dataprof.decide.search.grid import grid_configs
from dataprof.decide.workers import auto_workers
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.space import SearchSpace


def test_auto_workers_goes_past_the_cores() -> None:
    assert auto_workers(2) == (0, 1, 2, 4)
    assert auto_workers(6) == (0, 1, 2, 4, 6, 8, 12)
    assert auto_workers(1) == (0, 1, 2)


def test_grid_runs_workerless_config_once_and_keeps_baseline() -> None:
    space = SearchSpace(workers=(0, 2), prefetch_factors=(2, 4), pin_memory=(False,),
                        persistent_workers=(True, False))
    configs = grid_configs(space)
    assert configs[0] == baseline("torch")
    assert [c for c in configs if c.num_workers == 0] == [baseline("torch")]
    assert len(configs) == 1 + 2 * 2
    assert all(c.prefetch_factor is None and not c.persistent_workers for c in configs if c.num_workers == 0)


def test_grid_always_includes_baseline() -> None:
    configs = grid_configs(SearchSpace(workers=(4,), pin_memory=(True,)))
    assert configs[0] == baseline("torch")
    assert LoaderConfig(4, True, 2, True) in configs


def test_dataloader_kwargs_omit_worker_only_settings_without_workers() -> None:
    assert baseline("torch").dataloader_kwargs() == {"num_workers": 0, "pin_memory": False}
    assert LoaderConfig(2, False, 4, True).dataloader_kwargs()["prefetch_factor"] == 4


def test_the_new_knobs_are_config_keys_and_reach_the_dataloader_line() -> None:
    from dataprof.render.view import dataloader_line

    config = LoaderConfig(8, False, 2, True, in_order=False, multiprocessing_context="spawn")
    assert config.to_dict() == {"num_workers": 8, "pin_memory": False, "prefetch_factor": 2,
                                "persistent_workers": True, "in_order": False, "multiprocessing_context": "spawn",
                                "worker_kind": "process"}
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert LoaderConfig.from_dict({"num_workers": 8, "pin_memory": False, "prefetch_factor": 2,
                                   "persistent_workers": True}) == LoaderConfig(8, False, 2, True)  # older files
    assert config.label() == "w8 pf2 persist unordered spawn"
    assert dataloader_line(config, 16, False, None) == (
        "DataLoader(dataset, batch_size=16, num_workers=8, prefetch_factor=2, persistent_workers=True, "
        "pin_memory=False, in_order=False, multiprocessing_context='spawn')")
    assert "in_order" not in LoaderConfig(0, in_order=False).dataloader_kwargs()  # needs workers

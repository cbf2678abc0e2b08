"""Settling a sweep's settings once the dataset is loaded."""

from __future__ import annotations

import pytest

from dataprof.errors import UsageError
from dataprof.results.settings import SearchSpace, grid_configs


def test_in_order_and_the_start_method_are_discovered_from_the_dataloader_signature() -> None:
    import dataclasses

    from dataprof.decide.settings import resolve_settings
    from dataprof.results.settings import KNOBS, SweepSettings

    forced = SearchSpace((0, 2), in_order=(True, False), start_methods=("spawn",),
                         forced=("in_order", "multiprocessing_context"))
    settings = SweepSettings(target="t.py:D", space=forced)
    new = {"framework": "torch", "loader_arguments": list(KNOBS["torch"]) + ["dataset"], "start_method": "fork",
           "start_methods": ["fork", "spawn", "forkserver"]}
    space = resolve_settings(settings, new, lambda framework: 0).space
    assert (space.skipped, space.forced, space.in_order) == ((), ("in_order", "multiprocessing_context"), (True, False))
    assert space.start_method == "fork" and space.default_config(2).multiprocessing_context == "spawn"
    old = dict(new, loader_arguments=["dataset", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
                                      "multiprocessing_context"])
    space = resolve_settings(settings, old, lambda framework: 0).space  # torch before 2.6: no in_order
    assert space.skipped == ("in_order",) and space.in_order == (True,) and space.forced == ("multiprocessing_context",)
    assert space.to_dict()["skipped_knobs"] == ["in_order"]
    assert all(config.in_order is None for config in grid_configs(space))
    lonely = dict(new, start_methods=["spawn"])
    with pytest.raises(UsageError, match="--start-method forkserver: not offered here"):
        unoffered = dataclasses.replace(forced, start_methods=("forkserver",))
        resolve_settings(dataclasses.replace(settings, space=unoffered), lonely, lambda framework: 0)

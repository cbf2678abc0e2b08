from __future__ import annotations

from pathlib import Path

import pytest

from dataprof.cli.params import parse_int_list, parse_onoff_list, parse_size
from dataprof.errors import UsageError
from dataprof.measure.environment import cgroup_cpu_limit
from dataprof.results.settings import LoaderConfig, SearchSpace, auto_workers, baseline, grid_configs


def test_int_list_parses_and_dedups() -> None:
    assert parse_int_list("0, 2,4,2", "--workers", 0) == (0, 2, 4)


@pytest.mark.parametrize("text,fragment", [("-1", "below the minimum"), ("2,x", "'x' is not an integer"),
                                           ("", "'' is not an integer"), ("2,,4", "is not an integer")])
def test_int_list_rejects(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_int_list(text, "--workers", 0)


def test_prefetch_zero_is_rejected() -> None:
    with pytest.raises(UsageError, match="--prefetch-factor: 0 is below the minimum of 1"):
        parse_int_list("0", "--prefetch-factor", 1)


def test_onoff() -> None:
    assert parse_onoff_list("on,off", "--pin-memory") == (True, False)
    assert parse_onoff_list("OFF", "--pin-memory") == (False,)
    with pytest.raises(UsageError, match="'maybe' is not on or off"):
        parse_onoff_list("maybe", "--pin-memory")


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


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_limit(tmp_path) is None


def test_sizes() -> None:
    assert parse_size("3GB", 0) == 3 * 10**9
    assert parse_size("512MiB", 0) == 512 * 2**20
    assert parse_size("50%", 1000) == 500
    assert parse_size("1e9", 0) == 10**9
    for bad in ("lots", "0", "150%", "-1GB"):
        with pytest.raises(UsageError):
            parse_size(bad, 1000)


def test_in_order_and_the_start_method_are_discovered_from_the_dataloader_signature() -> None:
    import dataclasses

    from dataprof.decide.settings import resolve_settings
    from dataprof.errors import UsageError
    from dataprof.results.settings import KNOBS, SearchSpace, SweepSettings

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


def test_the_new_knobs_are_config_keys_and_reach_the_dataloader_line() -> None:
    from dataprof.render.view import dataloader_line

    config = LoaderConfig(8, False, 2, True, in_order=False, multiprocessing_context="spawn")
    assert config.to_dict() == {"num_workers": 8, "pin_memory": False, "prefetch_factor": 2,
                                "persistent_workers": True, "in_order": False, "multiprocessing_context": "spawn"}
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert LoaderConfig.from_dict({"num_workers": 8, "pin_memory": False, "prefetch_factor": 2,
                                   "persistent_workers": True}) == LoaderConfig(8, False, 2, True)  # older files
    assert config.label() == "w8 pf2 persist unordered spawn"
    assert dataloader_line(config, 16, False, None) == (
        "DataLoader(dataset, batch_size=16, num_workers=8, prefetch_factor=2, persistent_workers=True, "
        "pin_memory=False, in_order=False, multiprocessing_context='spawn')")
    assert "in_order" not in LoaderConfig(0, in_order=False).dataloader_kwargs()  # needs workers

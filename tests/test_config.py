from __future__ import annotations

from pathlib import Path

import pytest

from dataprof.config import (
    LoaderConfig,
    SearchSpace,
    auto_workers,
    baseline,
    grid_configs,
)
from dataprof.errors import UsageError
from dataprof.measure.environment import cgroup_cpu_limit
from dataprof.options import parse_int_list, parse_onoff_list, parse_size


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

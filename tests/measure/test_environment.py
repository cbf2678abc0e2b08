"""The machine's facts: the CPUs a cgroup quota allows."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dataprof.measure.environment import AF_UNIX_PATH_MAX, cgroup_cpu_limit, socket_hang_cause, worker_socket_chars


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


def test_the_quota_is_the_tightest_on_the_process_s_own_cgroup_and_those_above_it(tmp_path: Path) -> None:
    own = tmp_path / "self_cgroup"
    job = tmp_path / "v2" / "slurm" / "job_7"
    job.mkdir(parents=True)
    (tmp_path / "v2" / "cpu.max").write_text("max 100000\n")
    (job / "cpu.max").write_text("50000 100000\n")  # a job given half a CPU, not namespaced: /proc/self/cgroup
    own.write_text("0::/slurm/job_7\n")
    assert cgroup_cpu_limit(tmp_path / "v2", own) == 0.5
    (tmp_path / "v2" / "slurm" / "cpu.max").write_text("25000 100000\n")  # its parent's is tighter
    assert cgroup_cpu_limit(tmp_path / "v2", own) == 0.25
    v1 = tmp_path / "v1" / "cpu" / "pod"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("200000")
    (v1 / "cpu.cfs_period_us").write_text("100000")
    own.write_text("4:memory:/elsewhere\n1:cpu,cpuacct:/pod\n0::/\n")
    assert cgroup_cpu_limit(tmp_path / "v1", own) == 2.0
    assert cgroup_cpu_limit(tmp_path / "v1", tmp_path / "missing") is None  # no /proc: the root's only


def test_pinning_covers_every_thread_and_leaves_the_caller_as_it_was() -> None:
    from dataprof.measure.environment import pinned_to

    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("one CPU: nothing to pin to")
    stop = threading.Event()
    before = threading.Thread(target=stop.wait)
    before.start()
    try:
        with pinned_to(mine[:1]):
            inside = threading.Thread(target=stop.wait)
            inside.start()
            assert before.native_id and inside.native_id
            assert os.sched_getaffinity(before.native_id) == {mine[0]}  # a thread that was there already
            assert os.sched_getaffinity(inside.native_id) == {mine[0]}
            assert os.sched_getaffinity(0) == {mine[0]}
        assert os.sched_getaffinity(0) == set(mine)
        assert os.sched_getaffinity(before.native_id) == set(mine)
        assert os.sched_getaffinity(inside.native_id) == set(mine)  # started inside, not left pinned
    finally:
        stop.set()
        before.join()
        inside.join()


def test_cpus_is_one_line_where_the_platform_cannot_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprof.errors import UsageError
    from dataprof.measure.environment import pinned_cpus

    monkeypatch.delattr(os, "sched_getaffinity")
    assert pinned_cpus(None) is None
    with pytest.raises(UsageError, match="cannot pin a process to CPUs"):
        pinned_cpus(2)


def test_a_tmpdir_too_long_for_a_worker_s_socket_is_named_as_what_hangs_its_loader() -> None:
    assert worker_socket_chars("/tmp") == len("/tmp/pymp-abcdefgh/listener-abcdefgh")
    assert socket_hang_cause("/tmp") is None
    deep = "/tmp/" + "d" * (AF_UNIX_PATH_MAX - len("/tmp//pymp-abcdefgh/listener-abcdefgh") + 1)
    assert worker_socket_chars(deep) == AF_UNIX_PATH_MAX + 1
    assert socket_hang_cause(deep) == (f"TMPDIR is too long: its workers' sockets (pymp-…/listener-…) take "
                                       f"{AF_UNIX_PATH_MAX + 1} characters, over AF_UNIX's {AF_UNIX_PATH_MAX}, so no "
                                       "worker can pass a batch; a shorter TMPDIR")
    assert socket_hang_cause(deep[:-1]) is None

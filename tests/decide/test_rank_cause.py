"""The slowest rank of a run across nodes: named with its cause and the change on its node (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

from dataprof.decide.run import rank_cause
from dataprof.results.run import RankCause, RankRun, RunReport
from tests.conftest import run_report


def rank(rank: int, node: int, wait: float, **kwargs: Any) -> RankRun:
    figures: dict[str, Any] = {"ranks_on_node": 1, "num_workers": 2, "node_cpus": 2, "cpu_percent": 60.0,
                               "node_busy_percent": 50.0, "node_cpu_count": 2, "storage_read_bytes_per_s": 0.0,
                               "foreign_cpu_percent": 0.0, "iowait_percent": 0.0, "peak_memory_bytes": 1 << 30,
                               **kwargs}
    return RankRun(rank=rank, host=f"host{node}", exit_code=0, data_wait_fraction=wait, samples_per_s=100.0,
                   step_ms_p50=40.0, node=node, **figures)


def job(*ranks: RankRun) -> RunReport:
    return rank_cause(dataclasses.replace(run_report(0.01), ranks=ranks))


def cause_of(*ranks: RankRun) -> RankCause:
    cause = job(*ranks).rank_cause
    assert cause is not None
    return cause


def test_ranks_that_wait_alike_have_no_cause() -> None:
    assert job(rank(0, 0, 0.02), rank(1, 1, 0.04)).rank_cause is None
    assert job(rank(0, 0, 0.30), rank(1, 1, 0.32)).rank_cause is None  # all wait: the verdict says so, not this
    assert job(rank(0, 0, 0.02)).rank_cause is None  # one rank: nothing to compare


def test_a_node_short_of_cpus_for_its_workers_is_told_to_run_fewer_there() -> None:
    cause = cause_of(rank(0, 0, 0.01, node_cpus=8), rank(1, 0, 0.02, node_cpus=8),
                     rank(2, 1, 0.41, node_cpus=2, ranks_on_node=2, num_workers=8, cpu_percent=95.0),
                     rank(3, 1, 0.03, node_cpus=2, ranks_on_node=2, num_workers=8))
    assert (cause.rank, cause.node, cause.cause, cause.num_workers) == (2, 1, "oversubscribed", 1)
    assert cause.finding.id == "rank_imbalance" and cause.finding.severity == "critical"
    assert "rank 2 on node 1" in cause.finding.evidence and "waits 41%" in cause.finding.evidence
    assert "2 CPUs (the others have 8) for 2 rank(s) × 8 workers" in cause.finding.evidence
    assert "Give node 1 more CPUs or fewer ranks" in cause.finding.recommendation
    assert "num_workers=1 there" in cause.finding.recommendation


def test_a_node_whose_cpus_are_saturated_without_extra_workers_needs_cpus() -> None:
    cause = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.12, node_cpus=1, num_workers=1, cpu_percent=99.0))
    assert (cause.cause, cause.num_workers, cause.finding.severity) == ("cpus_short", None, "warning")
    assert "Give node 1 more CPUs" in cause.finding.recommendation


def test_cpus_that_other_processes_take_count_against_the_node() -> None:
    shared = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.30, node_cpus=1, num_workers=2, cpu_percent=55.0,
                                             foreign_cpu_percent=40.0))
    assert (shared.cause, shared.num_workers) == ("oversubscribed", 1) and "num_workers=1 there" in \
        shared.finding.recommendation
    assert "other processes 0.4" in shared.finding.evidence
    taken = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.30, node_cpus=1, num_workers=1, cpu_percent=45.0,
                                            foreign_cpu_percent=50.0))
    assert taken.cause == "cpus_taken" and "other processes took 0.5 of the 1 CPUs node 1" in taken.finding.evidence


def test_a_node_that_reads_from_storage_where_the_others_are_cached_is_told_to_warm_it() -> None:
    cause = cause_of(rank(0, 0, 0.01, storage_read_bytes_per_s=1e5),
                     rank(1, 1, 0.30, storage_read_bytes_per_s=80e6, cpu_percent=30.0))
    assert cause.cause == "storage" and "reads 80.0MB/s from storage, the others 100KB/s" in cause.finding.evidence
    assert "page cache on node 1" in cause.finding.recommendation


def test_a_rank_that_loads_in_its_training_process_is_given_workers() -> None:
    cause = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.25, num_workers=0, node_cpus=4, cpu_percent=80.0))
    assert (cause.cause, cause.num_workers) == ("no_workers", 4)


def test_a_slow_rank_with_idle_cpus_and_no_reads_is_told_to_look_and_hide_the_wait() -> None:
    cause = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.25, cpu_percent=40.0))
    assert (cause.cause, cause.num_workers) == ("unknown", 4)
    assert "num_workers=4 on node 1" in cause.finding.recommendation


def test_the_cause_round_trips_and_old_documents_still_read() -> None:
    report = job(rank(0, 0, 0.01), rank(1, 1, 0.25, cpu_percent=40.0))
    again = RunReport.from_dict(report.to_dict())
    assert again.rank_cause == report.rank_cause and again.ranks == report.ranks
    old = report.to_dict()
    old.pop("rank_cause")
    old["ranks"] = [{k: v for k, v in r.items() if k in ("rank", "host", "exit_code", "data_wait_fraction",
                                                        "samples_per_s", "step_ms_p50")} for r in old["ranks"]]
    read = RunReport.from_dict(old)
    assert read.rank_cause is None and read.ranks[1].node is None


def test_the_terminal_names_each_ranks_node_and_the_slow_ranks_cause() -> None:
    from dataprof.render.run import rank_lines

    text = "\n".join(line.plain for line in rank_lines(job(rank(0, 0, 0.01), rank(1, 1, 0.25, cpu_percent=40.0))))
    assert "rank 1 (node 1, host1): data wait 25%" in text
    assert "slowest rank (critical): rank 1 on node 1" in text and "→ Look at what differs on node 1" in text


def test_a_node_held_to_a_cgroup_quota_is_judged_by_its_quota_not_its_cpus() -> None:
    quota = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.40, node_cpus=1, node_cpu_quota=0.5, cpu_percent=48.0))
    assert (quota.cause, quota.num_workers) == ("oversubscribed", 1)
    assert "node 1 has 0.5 CPUs (the others have 2) for 1 rank(s) × 2 workers" in quota.finding.evidence
    assert "its tree used 0.5 cores of 0.5 CPUs" in quota.finding.evidence
    unlimited = cause_of(rank(0, 0, 0.01), rank(1, 1, 0.40, node_cpus=1, cpu_percent=48.0))
    assert unlimited.cause == "unknown"  # half of a whole CPU used: not what starves it

"""Distributed sweeps: ranks coordinated over gloo, on one CPU machine.

Real 2-rank sweeps through torch.distributed's launcher (``--nproc-per-node``)
and through ``python -m torch.distributed.run``; a rank whose trial crashes, a
rank made slow on purpose, a rank that dies. Figures are checked for
consistency, never against a stopwatch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dataprof.decide.diagnose import findings as rules
from dataprof.decide.ranks import aggregate_ranks, shared_batches
from dataprof.decide.thresholds import Thresholds
from dataprof.distributed import rank_from_env
from dataprof.errors import UsageError
from dataprof.results.codec import decode, encode
from dataprof.results.environment import RankInfo
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from tests.conftest import ROOT, free_port, run_report


@pytest.fixture
def quick() -> list[str]:
    """Two ranks share this machine's CPUs: longer windows of smaller batches, no rules of thumb, worker processes
    only (threads are not what these tests are about)."""
    return ["--trial-seconds", "0.5", "--prefetch-factor", "2", "--batch-size", "8", "--no-rules-of-thumb",
            "--worker-kind", "process"]


def dataprof(*args: str, launcher: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        env.pop(name, None)
    command = [sys.executable, *(launcher or []), "-m", "dataprof", "sweep", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def two_ranks(tmp_path: Path, target: str, *args: str, launcher: list[str] | None = None,
              code: int = 0) -> tuple[dict, subprocess.CompletedProcess[str]]:  # type: ignore[type-arg]
    """A 2-rank sweep (``--nproc-per-node 2`` unless a ``launcher`` starts the ranks); its JSON and process."""
    out = tmp_path / "run.json"
    ranks = [] if launcher else ["--nproc-per-node", "2"]
    proc = dataprof(target, *args, *ranks, "--json", str(out), launcher=launcher)
    assert proc.returncode == code, proc.stderr
    return json.loads(out.read_text()), proc


def rank(number: int, node: int = 0) -> RankInfo:
    return RankInfo(rank=number, world_size=4, local_rank=number % 2, local_world_size=2, node=node, host=f"n{node}")


def ok(rate: float) -> TrialResult:
    from dataprof.results.knobs import LoaderConfig

    return TrialResult.of(LoaderConfig(2, False, 2, True), "ok", samples_per_s=rate, wait_fraction=0.5,
                          samples_per_s_spread=0.01, cpu_percent=50.0)


def test_torchrun_environment_is_read_and_a_single_rank_is_not_distributed() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    info = rank_from_env(env)
    assert info is not None and (info.rank, info.local_rank, info.node, info.nodes) == (3, 1, 1, 2)
    assert rank_from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert rank_from_env({}) is None
    with pytest.raises(UsageError, match="malformed"):
        rank_from_env({"RANK": "x", "WORLD_SIZE": "2"})


def test_the_slowest_rank_sets_the_pace_and_any_failure_fails_the_config() -> None:
    trial = aggregate_ranks([(rank(0), ok(400.0)), (rank(1), ok(300.0)), (rank(2, 1), ok(410.0)),
                             (rank(3, 1), ok(390.0))])
    assert trial.samples_per_s == 4 * 300.0 and len(trial.ranks) == 4
    assert [r.rank for r in trial.ranks] == [0, 1, 2, 3] and trial.ranks[2].node == 1
    crashed = dataclasses.replace(ok(0.0), status="crashed", samples_per_s=None, error="a DataLoader worker died")
    failed = aggregate_ranks([(rank(0), ok(400.0)), (rank(1), crashed)])
    assert failed.status == "crashed" and failed.samples_per_s is None
    assert failed.error == "rank 1 (node 0): a DataLoader worker died"


def test_the_cpu_ceiling_counts_every_ranks_cpu_not_the_pace_setters_share() -> None:
    from dataprof.decide.diagnose.facts import cpu_ceiling

    def measured(rate: float, cpu: float) -> TrialResult:
        return ok(rate).replaced(cpu_percent=cpu, main_cpu_percent=cpu / 10, main_thread_cpu_percent=0.0,
                                   wait_cpu_ms_mean=0.0)

    # Two ranks on a 2-CPU node at the same pace; the slower one took 1.2 CPUs, the other 0.4.
    trial = aggregate_ranks([(rank(0), measured(3270.0, 40.0)), (rank(1), measured(3258.0, 120.0))])
    ceiling = cpu_ceiling(trial, 16, usable_cpus=1)
    assert ceiling is not None and trial.samples_per_s is not None
    assert ceiling == pytest.approx(2 / (1.6 / (3270.0 + 3258.0)))  # the node's 2 CPUs at 1.6 CPUs per 6,528/s
    assert trial.samples_per_s < ceiling  # 1.6 of 2 CPUs busy: below the ceiling, never 114% of it
    even = aggregate_ranks([(rank(0), measured(3000.0, 80.0)), (rank(1), measured(3000.0, 80.0))])
    assert cpu_ceiling(even, 16, usable_cpus=1) == pytest.approx(2 / (0.8 / 3000.0))


def test_rank_imbalance_names_the_slow_rank_and_its_node() -> None:
    report = Report.from_dict(json.loads((ROOT / "tests" / "data" / "sweep" / "io_bound.json").read_text()))
    from dataprof.decide.sweep import decide

    report = decide(report)
    assert report.recommendation is not None
    best = report.recommendation.config

    def with_ranks(rates: list[float]) -> Report:
        measured = [(rank(i, i // 2), ok(r)) for i, r in enumerate(rates)]
        ranked = aggregate_ranks(measured)
        trials = tuple(dataclasses.replace(t, ranks=ranked.ranks) if t.config == best else t for t in report.trials)
        return dataclasses.replace(report, trials=trials)

    assert rules.rank_imbalance(with_ranks([400, 395, 405, 398]), Thresholds()) is None
    finding = rules.rank_imbalance(with_ranks([400, 395, 150, 160]), Thresholds())
    assert finding is not None and finding.severity == "critical"
    assert "rank 2 (node 1, n1) loads 150 samples/s, 46% below the ranks' median 278 samples/s" in finding.evidence
    assert "node 1 as a whole loads 44% below the nodes' median" in finding.evidence
    assert "4 ranks × 150 samples/s = 600 samples/s instead of 1,110 samples/s" in finding.evidence


def check_two_ranks(run: dict, stdout: str) -> None:  # type: ignore[type-arg]
    assert run["environment"]["world_size"] == 2 and run["environment"]["local_world_size"] == 2
    assert run["settings"]["world_size"] == 2
    for trial in run["trials"]:
        assert trial["status"] == "ok", trial
        assert [r["rank"] for r in trial["ranks"]] == [0, 1]
        slowest = min(r["samples_per_s"] for r in trial["ranks"])
        assert trial["samples_per_s"] == pytest.approx(2 * slowest)
        assert trial["epoch_samples"] in (None, 128)  # each rank's DistributedSampler shard: half of 256
    assert stdout.count("Recommended") == 1 and "Ranks at" in stdout


@pytest.mark.slow
def test_nproc_per_node_runs_two_ranks_through_the_launcher_api(tmp_path: Path, datasets: str,
                                                                quick: list[str]) -> None:
    run, proc = two_ranks(tmp_path, f"{datasets}:make_tiny", *quick, "--arg", "length=256", "--workers", "0,2")
    check_two_ranks(run, proc.stdout)
    assert any(t["epoch_samples"] == 128 for t in run["trials"])


@pytest.mark.slow
def test_under_torchrun_every_rank_measures_and_rank_0_reports(tmp_path: Path, datasets: str, quick: list[str]) -> None:
    run, proc = two_ranks(tmp_path, f"{datasets}:make_tiny", *quick, "--arg", "length=256", "--workers", "0,2",
                          launcher=["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"])
    check_two_ranks(run, proc.stdout)
    assert "error" not in proc.stderr.lower()


@pytest.mark.slow
def test_a_rank_whose_trial_crashes_fails_the_config_for_all_and_the_sweep_goes_on(tmp_path: Path, datasets: str,
                                                                                   quick: list[str]) -> None:
    trials = two_ranks(tmp_path, f"{datasets}:SegfaultOnRank", *quick, "--workers", "0,2")[0]["trials"]
    assert trials[0]["status"] == "ok"
    crashed = next(t for t in trials if t["config"]["num_workers"] == 2)
    assert crashed["status"] == "crashed" and crashed["error"].startswith("rank 1 (node 0): a DataLoader worker "
                                                                          "died by SIGSEGV")
    assert [r["status"] for r in crashed["ranks"]] == ["ok", "crashed"]


@pytest.mark.slow
def test_a_slow_rank_is_diagnosed_as_rank_imbalance(tmp_path: Path, datasets: str, quick: list[str]) -> None:
    run, _ = two_ranks(tmp_path, f"{datasets}:SlowRank", *quick, "--arg", "factor=3.0", "--workers", "0,2")
    finding = next(f for f in run["diagnosis"]["findings"] if f["id"] == "rank_imbalance")
    assert "rank 1 (node 0" in finding["evidence"]
    best = next(t for t in run["trials"] if t["config"] == run["best"]["config"])
    fast, slow = (r["samples_per_s"] for r in best["ranks"])
    assert slow < fast / 2  # it sleeps 3 × as long per sample


@pytest.mark.slow
def test_ranks_loading_the_same_stream_are_told_apart_from_ranks_that_split_it(tmp_path: Path, datasets: str,
                                                                               quick: list[str]) -> None:
    same, proc = two_ranks(tmp_path, f"{datasets}:RankStream", *quick, "--arg", "by_rank=False", "--workers", "0")
    finding = next(f for f in same["diagnosis"]["findings"] if f["id"] == "rank_duplicates")
    assert finding["severity"] == "critical" and "RANK and WORLD_SIZE" in finding["recommendation"]
    assert all(t["rank_repeat_fraction"] == 1.0 for t in same["trials"])
    assert "each loading its own stream (an IterableDataset splits itself by rank)" in " ".join(proc.stdout.split())
    split, _ = two_ranks(tmp_path, f"{datasets}:RankStream", *quick, "--workers", "0")
    assert all(t["rank_repeat_fraction"] == 0.0 for t in split["trials"])
    assert "rank_duplicates" not in [f["id"] for f in split["diagnosis"]["findings"]]


def test_shared_batches_is_the_share_of_each_ranks_batches_another_rank_loaded() -> None:
    assert shared_batches([(1, 2), (3, 4)]) == 0.0
    assert shared_batches([(1, 2), (1, 2)]) == 1.0
    assert shared_batches([(1, 2, 3, 4), (1, 5, 6, 7)]) == 0.25  # batch 1 on both: 2 of 8
    assert shared_batches([(1, 2), ()]) is None  # a map-style dataset keeps no fingerprints


def test_a_collective_that_fails_for_a_rank_gone_says_so_in_one_line() -> None:
    from types import SimpleNamespace

    from dataprof.distributed import Coordinator, RankLost

    def closed(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed "
                           "by peer [127.0.0.1]:28385. This is typically caused by a remote worker crashing. Check "
                           "the logs of the remote worker before reporting an error.")

    coordinator = object.__new__(Coordinator)  # a group whose peer is gone: every collective fails
    coordinator.info = RankInfo(rank=0, world_size=2, local_rank=0, local_world_size=1, node=0, host="h")
    coordinator.dist = SimpleNamespace(broadcast=closed, gather=closed, barrier=closed, all_gather=closed)
    for collective in (lambda: coordinator.broadcast(None), lambda: coordinator.gather(ok(1.0)),
                       coordinator.barrier, lambda: coordinator.agree(None)):
        with pytest.raises(RankLost) as lost:
            collective()
        assert lost.value.message == "a rank left the sweep's group (gloo: Connection closed by peer " \
                                     "[127.0.0.1]:28385)" and lost.value.exit_code == 130


@pytest.mark.slow
@pytest.mark.parametrize("target, start, message", [
    ("BadInit", "error: ", "BadInit(...) raised FileNotFoundError"),  # every rank fails alike: rank 0 says it
    ("BadInitOnRank", "error: rank 1 could not start: ", "BadInitOnRank(...) raised OSError: no such shard on rank 1"),
    ("BadInitOnRank --arg bad_rank=0", "error: ", "BadInitOnRank(...) raised OSError: no such shard on rank 0"),
])
def test_a_failure_to_start_is_said_once(target: str, start: str, message: str, datasets: str,
                                         quick: list[str]) -> None:
    name, *args = target.split()
    proc = dataprof(f"{datasets}:{name}", *args, *quick, "--workers", "0", "--nproc-per-node", "2")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 3 and len(errors) == 1, proc.stderr
    assert errors[0].startswith(start) and message in errors[0], proc.stderr


@pytest.mark.slow
def test_a_rank_that_dies_stops_every_rank_and_keeps_what_was_measured(tmp_path: Path, datasets: str,
                                                                       quick: list[str]) -> None:
    run, proc = two_ranks(tmp_path, f"{datasets}:KillsRank", *quick, "--workers", "0,2", code=130)
    assert "error: rank 1 died by SIGKILL; the sweep stopped on every rank; the trials measured before are in " \
        f"{tmp_path / 'run.json'}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1  # rank 0 saw it leave
    assert [t["status"] for t in run["trials"]] == ["ok"] and run["complete"] is False


@pytest.mark.slow
def test_a_rank_that_stops_answering_ends_the_sweep_in_seconds_with_what_was_measured(tmp_path: Path, datasets: str,
                                                                                     quick: list[str]) -> None:
    started = time.monotonic()
    run, proc = two_ranks(tmp_path, f"{datasets}:StopsRank", *quick, "--workers", "0,2", code=130)
    # rank 1's process stopped mid-trial: no collective of the group ends before its timeout (600 s here)
    assert "error: rank 1 stopped answering (nothing from its dataprof for 15 s); the sweep stopped on this rank; " \
        f"the trials measured before are in {tmp_path / 'run.json'}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [t["status"] for t in run["trials"]] == ["ok"] and run["complete"] is False
    assert time.monotonic() - started < 120
    assert not [p for p in psutil.process_iter(["cmdline"]) if "StopsRank" in " ".join(p.info["cmdline"] or ())]


@pytest.mark.slow
def test_a_rank_without_a_rendezvous_gets_one_line_not_a_traceback(datasets: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
    proc = subprocess.run([sys.executable, "-m", "dataprof", "sweep", f"{datasets}:Tiny"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "rank 1 could not join the ranks' gloo group" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_nproc_per_node_under_torchrun_is_a_usage_error(datasets: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    proc = subprocess.run([sys.executable, "-m", "dataprof", "sweep", f"{datasets}:Tiny", "--nproc-per-node", "2"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "already runs under torchrun" in proc.stderr


def test_a_nodes_ram_and_dev_shm_are_shared_out_among_its_ranks(datasets: str) -> None:
    from dataprof.decide.search.common import search_budget
    from dataprof.decide.settings import settings_for
    from dataprof.measure.environment import probe_environment
    from dataprof.results.environment import CpuBudget, DatasetInfo, ProbeReply
    from dataprof.results.request import LoadOptions, SweepRequest

    info = RankInfo(rank=1, world_size=4, local_rank=1, local_world_size=2)
    request = SweepRequest(LoadOptions(f"{datasets}:Tiny", batch_size=8))
    budget = CpuBudget(usable=1, affinity=2, quota=None, cpu_count=2)
    assert settings_for(request, budget, 1_000_000).memory_limit_bytes == 800_000
    shared = settings_for(request, budget, 1_000_000, info)
    assert shared.memory_limit_bytes == 400_000 and (shared.rank, shared.world_size, shared.ranks_per_node) == (1, 4, 2)
    env = probe_environment("cpu", rank=info)
    dataset = DatasetInfo(kind="map", type_name="Tiny", length=8, init_s=0.0, batch_bytes=1000)
    limits = search_budget(shared, env, dataset, ProbeReply())
    assert env.shm_free_bytes is not None and limits.shm_free_bytes == env.shm_free_bytes // 2
    assert env.world_size == 4 and env.local_world_size == 2 and "per rank" in env.cpu_reason


def test_rank_0_gathers_every_ranks_figures_and_names_a_missing_one(tmp_path: Path) -> None:
    from dataprof.measure.watch.gather import gather_runs
    from dataprof.measure.watch.meeting import FolderMeeting
    from dataprof.results.environment import RankInfo

    job = tmp_path / "job"
    slow = dataclasses.replace(run_report(0.5), exit_code=0)
    assert gather_runs(slow, RankInfo(rank=1, world_size=3, host="b"), FolderMeeting(job)) is None  # only says it
    gathered = gather_runs(run_report(0.1), RankInfo(rank=0, world_size=3, host="a"), FolderMeeting(job),
                           timeout_s=0.05, sleep=lambda s: None)
    assert gathered is not None and [(r.rank, r.host) for r in gathered.ranks] == [(0, "a"), (1, "b")]
    assert gathered.slowest_rank().rank == 1  # type: ignore[union-attr]
    assert "ranks 2 left no report" in gathered.notes[-1] and not job.exists()  # nothing left behind in /tmp


def test_rank_0_stops_waiting_for_a_rank_gone_silent_and_says_so(tmp_path: Path) -> None:
    from dataprof.measure.watch.gather import gather_runs
    from dataprof.measure.watch.meeting import ALIVE_KEY, FolderMeeting
    from dataprof.measure.watch.ranks import SILENT_S
    from dataprof.results.environment import RankInfo

    job = tmp_path / "job"
    gather_runs(run_report(0.5), RankInfo(rank=1, world_size=3, host="b"), FolderMeeting(job))
    FolderMeeting(job).count(f"{ALIVE_KEY}-2", 3)  # rank 2 counted that it was there, then its node died
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    gathered = gather_runs(run_report(0.1), RankInfo(rank=0, world_size=3, host="a"), FolderMeeting(job),
                           sleep=sleep, clock=lambda: clock[0])
    assert gathered is not None and [r.rank for r in gathered.ranks] == [0, 1]
    assert SILENT_S <= clock[0] < SILENT_S + 2  # not the 120 s a report may take to come
    assert gathered.notes[-1] == "ranks 2 stopped answering (nothing from their dataprof for 15 s): no report"
    assert not job.exists()


def test_a_rank_0_stopped_by_sigterm_across_nodes_is_an_interrupted_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprof.distributed import watch_ranks
    from dataprof.measure.launch import Launched
    from dataprof.measure.watch.settings import WatchSettings
    from dataprof.results.environment import NodeJob

    # rank 0's script ended by SIGTERM sent to its process alone: it gathered no report, and the others ended well
    monkeypatch.setattr("dataprof.distributed.launch_ranks", lambda *args, **kwargs: Launched(0, values={0: None}))
    job = NodeJob(2, 0, "127.0.0.1", 29500)
    assert watch_ranks(WatchSettings(target="train.py"), 1, job, "run-a") is None


def test_the_sweep_s_ranks_exchange_json_and_read_it_back_as_their_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprof.distributed import Coordinator
    from dataprof.results.knobs import LoaderConfig

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    info = RankInfo(rank=0, world_size=1, host="h")
    coordinator = Coordinator(info, timeout_s=10)
    try:
        config = LoaderConfig(num_workers=4, pin_memory=True, prefetch_factor=2, persistent_workers=True)
        assert coordinator.broadcast(config) == config and coordinator.broadcast(None) is None
        result = decode(TrialResult, encode(ok(512.0))).replaced(batch_marks=(7, 11))  # not in the JSON
        assert coordinator.gather(result) == [(info, result)]
        assert coordinator.agree(None) is False
    finally:
        coordinator.close()


def test_rank_0_takes_a_rank_s_report_only_from_its_latest_dataprof_in_the_round(tmp_path: Path) -> None:
    from dataprof.measure.watch.joining import latest
    from dataprof.measure.watch.meeting import WHOIS_KEY, FolderMeeting

    meeting = FolderMeeting(tmp_path / "job")
    earlier, now = json.dumps({"ticket": 2, "report": {}}), json.dumps({"ticket": 3, "report": {}})
    assert latest(meeting, 1, earlier)  # no word of who rank 1 is: a directory's meeting, taken
    meeting.put(f"{WHOIS_KEY}-1", "3")  # rank 1's node restarted it: its new dataprof took ticket 3
    assert not latest(meeting, 1, earlier) and latest(meeting, 1, now)
    assert latest(meeting, 1, json.dumps({"report": {}})) and latest(meeting, 1, "done")

"""Two nodes on this machine, as CI has them: two ``torchrun --nnodes 2`` launches on ``127.0.0.1`` with
different node ranks, each with its own ``$TMPDIR`` (separate hosts share no directory). dataprof's processes
meet through the launcher's store; every rank ends at the same batch; node 0 writes the document."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port

NODE_TIMEOUT_S = 240


SHORT_DIRS: list[str] = []
"""The nodes' TMPDIRs of the test under way (:func:`start_nodes`), removed after it."""


@pytest.fixture(autouse=True)
def _short_dirs_removed() -> Iterator[None]:
    yield
    while SHORT_DIRS:
        shutil.rmtree(SHORT_DIRS.pop(), ignore_errors=True)


def start_nodes(tmp_path: Path, nodes: tuple[int, ...], argv: Callable[[int, str, Path], list[str]],
                first_path: Path | None = None, **popen: Any) -> list[subprocess.Popen[str]]:
    """``argv(node, port, its TMPDIR)`` started for each of ``nodes``, each with its own ``$TMPDIR`` (one port for
    all to meet at; ``first_path`` first on their Python path). Each TMPDIR is a short path (``tmp_path/nodeN``
    links to it): under a worker of ``pytest -n``, ``tmp_path`` is long enough that the sockets DataLoader workers
    pass batches through (``pymp-…/listener-…``) would not fit an AF_UNIX path, and a loader with workers would
    hang."""
    port = str(free_port())
    procs = []
    for node in nodes:
        tmp = tmp_path / f"node{node}"
        SHORT_DIRS.append(tempfile.mkdtemp(prefix=f"node{node}-"))
        tmp.symlink_to(SHORT_DIRS[-1])
        procs.append(subprocess.Popen(argv(node, port, tmp), cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                          [*([str(first_path)] if first_path else []), str(ROOT)]),
                                                                       TMPDIR=SHORT_DIRS[-1]), **popen))
    return procs


def ended(procs: list[subprocess.Popen[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Each of ``procs`` once it ended (every one killed when one outlasts :data:`NODE_TIMEOUT_S`)."""
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=NODE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def watched_scripts(pid: int) -> list[Any]:
    """The scripts dataprof watches under the process ``pid`` (psutil's processes; one that ends meanwhile is
    passed over)."""
    import psutil

    found = []
    for process in psutil.Process(pid).children(recursive=True):
        try:
            if "watch.watched" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def two_nodes(tmp_path: Path, *command: str, first_path: Path | None = None) -> list[subprocess.CompletedProcess[str]]:
    """``torchrun --nnodes 2 --nproc-per-node 1 COMMAND`` as node 0 and node 1, each with its own ``$TMPDIR``;
    both ended."""
    return ended(start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--master-addr",
        "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", *command], first_path))


@pytest.mark.slow
def test_run_over_two_nodes_that_share_no_directory_ends_every_rank_at_the_same_batch(tmp_path: Path) -> None:
    run_over_two_nodes(tmp_path / "run")


LATE_READER = """import time
from dataprof.measure.watch import ranks
read = ranks.RankEnd._read
ranks.RankEnd._read = lambda self: (time.sleep(3.0), read(self))[1]  # a starved thread hears the end late
"""


@pytest.mark.slow
def test_a_rank_that_hears_the_end_late_still_ends_at_the_same_batch(tmp_path: Path) -> None:
    """Rank 1's watcher reads the end rank 0 named 3 s late, as on a busy machine: rank 0 waits for it a batch
    before the end, and both ranks end there (one that stepped a batch further would all-reduce with a rank that
    had left)."""
    late = tmp_path / "late"
    late.mkdir()
    (late / "sitecustomize.py").write_text("import os\nif os.environ.get('RANK') == '1':\n" +
                                           "".join(f"    {line}\n" for line in LATE_READER.splitlines()))
    node0, node1 = two_nodes(tmp_path, "-m", "dataprof", "run", "--seconds", "2", "--json", str(tmp_path / "r.json"),
                             "examples/ddp_train.py", first_path=late)
    assert node1.returncode == 0, node1.stderr  # before: "Connection closed by peer", and node 0 left waiting
    assert node0.returncode == 0, node0.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    assert [(r["rank"], r["exit_code"]) for r in document["ranks"]] == [(0, 0), (1, 0)]


@pytest.mark.slow
def test_a_sweep_over_two_nodes_that_share_no_directory_measures_every_rank(tmp_path: Path, datasets: str,
                                                                            quick: list[str]) -> None:
    sweep_over_two_nodes(tmp_path / "sweep", datasets, quick)


def run_over_two_nodes(tmp_path: Path) -> None:
    """Every rank ends at the same batch; node 0 writes the document; nothing is left in either TMPDIR."""
    tmp_path.mkdir()
    out = tmp_path / "run.json"
    node0, node1 = two_nodes(tmp_path, "-m", "dataprof", "run", "--seconds", "4", "--json", str(out),
                             "examples/ddp_train.py", "--slow-rank", "1")
    assert node0.returncode == 0, node0.stderr
    assert node1.returncode == 0, node1.stderr  # the training on node 1 was not broken by the watch's end
    assert node0.stdout.count("Verdict:") == 1 and "Verdict:" not in node1.stdout
    document = json.loads(out.read_text())
    assert [(r["rank"], r["node"], r["exit_code"]) for r in document["ranks"]] == [(0, 0, 0), (1, 1, 0)]
    assert all(r["node_cpus"] and r["ranks_on_node"] == 1 for r in document["ranks"])  # each node's own figures
    assert not any("left no report" in note for note in document["notes"])
    for node in ("node0", "node1"):
        assert not list((tmp_path / node).glob("dataprof-run-*"))  # they met through the store, not a directory


def sweep_over_two_nodes(tmp_path: Path, datasets: str, quick: list[str]) -> None:
    """Every rank of every trial measured, each on its node; node 0 reports."""
    tmp_path.mkdir()
    out = tmp_path / "sweep.json"
    node0, node1 = two_nodes(tmp_path, "-m", "dataprof", "sweep", f"{datasets}:make_tiny", *quick, "--arg",
                             "length=256", "--workers", "0,2", "--json", str(out))
    assert node0.returncode == 0, node0.stderr
    assert node1.returncode == 0, node1.stderr
    document = json.loads(out.read_text())
    assert document["environment"]["world_size"] == 2 and document["environment"]["nodes"] == 2
    for trial in document["trials"]:
        assert trial["status"] == "ok", (trial["config"], trial["error"])
        assert [(r["rank"], r["node"]) for r in trial["ranks"]] == [(0, 0), (1, 1)]
    assert node0.stdout.count("Recommended") == 1 and "Recommended" not in node1.stdout


@pytest.mark.slow
def test_an_elastic_restart_after_a_rank_failed_runs_its_second_round_to_the_end_reading_nothing_of_the_first(
        tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    node0, node1 = ended(start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--master-addr",
        "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "--max-restarts", "1", "-m", "dataprof", "run",
        "--json", str(out), "tests/fixtures/ddp_fail_script.py", "--fail-once", "--epochs", "2"]))
    assert "rank 1 fails before it joins" in node1.stderr  # the first round
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-2000:] + node1.stderr[-2000:]
    document = json.loads(out.read_text())  # the second round's: rank 1 trained there
    assert [(r["rank"], r["exit_code"]) for r in document["ranks"]] == [(0, 0), (1, 0)], document["notes"]
    assert all(r["samples_per_s"] for r in document["ranks"])


@pytest.mark.slow
def test_a_watcher_stopped_for_20_s_ends_no_training_and_its_rank_is_reported(tmp_path: Path) -> None:

    out = tmp_path / "run.json"
    procs = start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--master-addr",
        "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "-m", "dataprof", "run", "--seconds", "30",
        "--json", str(out), "examples/ddp_train.py", "--length", "1000000"], start_new_session=True)
    try:
        while not (watched := watched_scripts(procs[1].pid)):
            assert procs[1].poll() is None and procs[0].poll() is None
            time.sleep(0.2)
        watcher = watched[0].parent()  # node 1's dataprof, descheduled: the training goes on without it
        watcher.suspend()
        time.sleep(20.0)
        assert watched[0].is_running() and procs[0].poll() is None  # neither training was ended meanwhile
        watcher.resume()
        node0, node1 = ended(procs)  # at rank 0's --seconds, which node 1's script reads without its watcher
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-2000:] + node1.stderr[-2000:]
    document = json.loads(out.read_text())
    assert [(r["rank"], r["exit_code"]) for r in document["ranks"]] == [(0, 0), (1, 0)], document["notes"]
    assert document["ended_by"] == "--seconds reached"


@pytest.mark.slow
def test_ranks_started_the_slurm_way_without_torchrun_are_each_watched_to_the_end_and_say_so_in_one_line(
        tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    procs = start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        "env", f"RANK={node}", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", f"MASTER_PORT={port}", sys.executable, "-m",
        "dataprof", "run", "--seconds", "2", "--json", str(out), "examples/ddp_train.py", "--steps", "300"])
    node0, node1 = ended(procs)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-2000:] + node1.stderr[-2000:]
    said = [line for line in node0.stderr.splitlines() if "cannot meet the other ranks'" in line]
    assert len(said) == 1 and "--seconds not applied" in said[0] and "cannot meet" not in node1.stderr
    document = json.loads(out.read_text())  # rank 0's own, its training run to the end: 300 steps
    assert document["loaders"][0]["batches"] == 300 and "Verdict:" not in node1.stdout


@pytest.mark.slow
def test_a_node_that_dies_in_a_run_ends_it_on_the_others_with_what_they_measured(tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "run.json"
    procs = start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--master-addr",
        "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "-m", "dataprof", "run", "--json", str(out),
        "examples/ddp_train.py", "--workers", "1", "--length", "1000000"], start_new_session=True)
    try:
        while not any(p.children() for p in watched_scripts(procs[1].pid)):  # node 1 trains, with its worker
            assert procs[1].poll() is None and procs[0].poll() is None
            time.sleep(0.2)
        time.sleep(1.0)
        for process in [psutil.Process(procs[1].pid), *psutil.Process(procs[1].pid).children(recursive=True)]:
            process.kill()  # node 1 dies: its launcher, and its ranks (each in a session of its own), at once
        killed = time.monotonic()
        node0 = ended(procs[:1])[0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    # its collective failed with its peer gone (no watch signals it); then rank 0 waited 15 s for rank 1's
    # report, not 120 s
    assert time.monotonic() - killed < 60 and node0.returncode != 0, node0.stderr
    document = json.loads(out.read_text())
    assert [r["rank"] for r in document["ranks"]] == [0]
    assert "ranks 1 stopped answering (nothing from their dataprof for 15 s): no report" in document["notes"]


@pytest.mark.slow
def test_a_node_that_dies_in_a_sweep_ends_it_on_the_others_in_one_line_with_what_they_measured(
        tmp_path: Path, datasets: str, quick: list[str]) -> None:
    import psutil

    out = tmp_path / "sweep.json"
    procs = start_nodes(tmp_path, (0, 1), lambda node, port, tmp: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--master-addr",
        "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "-m", "dataprof", "sweep", f"{datasets}:Sleepy",
        *quick, "--batch-size", "8", "--workers", "0,2,4,8", "--json", str(out)], start_new_session=True)
    try:
        assert procs[0].stderr is not None
        said = []
        for line in procs[0].stderr:  # node 0 says each trial it measured
            said.append(line)
            if line.startswith("[1"):
                break
        node0 = psutil.Process(procs[0].pid).children(recursive=True)  # its rank, the rank's host and trial
        for process in [psutil.Process(procs[1].pid), *psutil.Process(procs[1].pid).children(recursive=True)]:
            process.kill()  # node 1 dies: its launcher and its rank (in a session of its own), at once
        killed = time.monotonic()
        _, err = procs[0].communicate(timeout=NODE_TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - killed < 60 and procs[0].returncode != 0, err
    errors = [line for line in "".join(said).splitlines() + err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: a rank left the sweep's group (gloo: ") and \
        errors[0].endswith(f"; the sweep stopped on this rank; the trials measured before are in {out}"), err
    assert "dataprof/" not in err  # torchrun says its rank failed; dataprof's own traceback never shows
    document = json.loads(out.read_text())
    assert document["complete"] is False and document["trials"][0]["status"] == "ok"
    time.sleep(0.5)  # node 0's hosts and trials end with its rank (their parent-death signal)
    assert not [p for p in node0 if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def tune_argv(*options: str, nnodes: int = 2) -> Callable[[int, str, Path], list[str]]:
    """``dataprof tune --nnodes N --node-rank K`` with ``options``, its ``--workdir`` and ``--json`` in the node's
    ``$TMPDIR``, over examples/ddp_train.py."""
    return lambda node, port, tmp: [
        sys.executable, "-m", "dataprof", "tune", "--nnodes", str(nnodes), "--node-rank", str(node), "--master-port",
        port,
        "--workdir", str(tmp / "runs"), "--trial-steps", "30", *options, "--json", str(tmp / "tune.json"),
        "examples/ddp_train.py", "--length", "100000"]


def tune_nodes(tmp_path: Path, nodes: tuple[int, ...], *options: str) -> list[subprocess.CompletedProcess[str]]:
    """:func:`tune_argv` for each of ``nodes``, each ended."""
    return ended(start_nodes(tmp_path, nodes, tune_argv(*options)))


@pytest.mark.slow
def test_a_tune_over_two_nodes_runs_each_run_as_the_whole_job_and_node_0_reports(tmp_path: Path) -> None:
    node0, node1 = tune_nodes(tmp_path, (0, 1), "--budget", "30")
    assert node1.returncode == 0, node1.stderr
    assert "run(s) made as node 0 said; node 0 reports" in node1.stderr
    assert "Answer" in node0.stdout and "Answer" not in node1.stdout
    document = json.loads((tmp_path / "node0" / "tune.json").read_text())
    runs = document["trials"]
    assert len(runs) >= 2 and all([r["node"] for r in run["ranks"]] == [0, 1] for run in runs)  # both nodes' ranks
    assert any("on each of 2 nodes" in note for note in document["notes"])
    made = len(list((tmp_path / "node1" / "runs").glob("run-*")))
    assert made == len(runs)  # node 1 ran each run node 0 said, in its own directory
    assert not (tmp_path / "node1" / "tune.json").exists()
    for node in ("node0", "node1"):
        assert not list((tmp_path / node).glob("torchelastic_*")) and not list((tmp_path / node).glob("dataprof-*"))


@pytest.mark.slow
def test_a_tune_whose_other_node_never_joins_ends_in_one_line_within_the_join_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    (node0,) = tune_nodes(tmp_path, (0,), "--join-timeout", "5")
    assert node0.returncode != 0 and "Traceback" not in node0.stderr
    assert "did not meet" in node0.stderr.strip().splitlines()[-1]
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_a_node_whose_node_0_never_starts_ends_in_one_line_within_the_join_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    (node1,) = tune_nodes(tmp_path, (1,), "--join-timeout", "3")
    assert node1.returncode == 2 and "Traceback" not in node1.stderr
    assert "node 0's dataprof tune could not be reached" in node1.stderr.strip().splitlines()[-1]
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_a_node_that_dies_in_a_tune_ends_it_with_the_runs_measured_kept(tmp_path: Path) -> None:
    procs = dict(enumerate(start_nodes(tmp_path, (0, 1), tune_argv("--join-timeout", "10", "--budget", "60"),
                                       start_new_session=True)))
    try:
        assert procs[1].stderr is not None
        for line in procs[1].stderr:  # node 1 says each run it makes
            if "run 2 as node 0 says it" in line:
                break
        os.killpg(procs[1].pid, signal.SIGKILL)  # before its ranks joined run 2 (as they start it: three nodes)
        killed = time.monotonic()
        out, err = procs[0].communicate(timeout=NODE_TIMEOUT_S)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert procs[0].returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "node 1 stopped answering during run 2" in last or "the nodes did not meet" in last, err
    # the script's own traceback may show (its collective's peer gone), never dataprof's
    assert "the runs measured are kept" in last and "dataprof/tuner.py" not in err and "dataprof/cli/" not in err
    # the join timeout (10 s), then the launcher's stop of this node's ranks (SIGTERM, 5 s, SIGKILL), not the
    # 300 s torch's launcher would wait for a node gone after its ranks ended, nor the script's own collective's
    assert time.monotonic() - killed < 60
    document = json.loads((tmp_path / "node0" / "tune.json").read_text())
    assert document["complete"] is False and document["trials"][0]["status"] == "ok"


@pytest.mark.slow
def test_of_three_nodes_one_that_dies_in_a_tune_ends_it_on_both_others_each_naming_it(tmp_path: Path) -> None:
    procs = dict(enumerate(start_nodes(tmp_path, (0, 1, 2), tune_argv("--join-timeout", "10", "--budget", "90",
                                                                      nnodes=3), start_new_session=True)))
    try:
        assert procs[2].stderr is not None
        for line in procs[2].stderr:
            if "run 2 as node 0 says it" in line:
                break
        time.sleep(3.0)  # as its ranks start the script
        os.killpg(procs[2].pid, signal.SIGKILL)  # node 2, its launcher and its ranks, at once
        killed = time.monotonic()
        ends = {node: procs[node].communicate(timeout=NODE_TIMEOUT_S) for node in (0, 1)}
        took = time.monotonic() - killed
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    # the join timeout (10 s) for node 0 to find node 2 silent, a second for node 1 to read why, then each
    # launcher's stop of its ranks (SIGTERM, 5 s, SIGKILL): 60 s is the margin docs/tune.md states
    assert took < 10 + 60, ends
    for node in (0, 1):
        last = ends[node][1].strip().splitlines()[-1]
        assert procs[node].returncode != 0 and "node 2 stopped answering during run 2" in last, ends[node][1]
    assert "node 1: node 0 stopped run 2" in ends[1][1]
    assert procs[0].returncode == 130 and "the runs measured are kept" in ends[0][1].strip().splitlines()[-1]
    assert not any("dataprof/tuner.py" in err or "dataprof/cli/" in err for _, err in ends.values())
    document = json.loads((tmp_path / "node0" / "tune.json").read_text())
    assert document["complete"] is False and document["trials"][0]["status"] == "ok"

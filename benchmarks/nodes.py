"""Two nodes on this machine, node 1 given less CPU: does ``dataprof run`` name the slow node with its cause, and
does the change it names for that node train faster than the best config for every node?

Each node is a ``torchrun --nnodes 2`` launch on ``127.0.0.1`` with its own ``$TMPDIR`` (separate hosts share no
directory) and its own CPUs: node 0 on ``--node0-cpus``, node 1 on ``--node1-cpus`` and, as root, in a cgroup of
its own held to ``--quota`` CPUs (a Slurm job's or a pod's limit); without root, node 1 runs at ``nice -n 10``
instead. The training is ``examples/ddp_train.py`` with samples that cost CPU (``--sample-cpu-ms``), in lockstep
through gloo's all-reduce.

1. ``--runs`` times: ``dataprof run --seconds S --json`` over the job at ``--workers`` on both nodes; a hit when the
   document's ``rank_cause`` names rank 1 on node 1 and a CPU cause (its node's CPUs).
2. The job's it/s (rank 0's own printed rate; the ranks move in lockstep), unwatched, at every ``num_workers`` in
   ``--uniform`` on both nodes and at the per-node answer (node 0 at ``--workers``, node 1 at the ``num_workers``
   the cause named), interleaved over ``--rounds``: the per-node answer's median against the best uniform one's.
   With ``--tune-budget``, ``dataprof tune --nnodes 2`` of the job too (from ``--workers`` on both nodes), its answer
   (a ``num_workers`` per node where it found one) timed by hand beside them.
3. The watch's cost to the job: its it/s watched by ``dataprof run`` on every rank (to the script's own end)
   against unwatched, interleaved over ``--rounds``: the median of each round's watched / plain.
4. (``--parts requests``) The store requests ``dataprof run --seconds`` makes, one node of ``--ranks`` ranks as
   processes (``torchrun --standalone``, ranks with no collective of their own): every dataprof process's requests
   counted (``benchmarks/_store_count``), over the job's wall time, per rank: flat in the ranks when the watch's
   cost to the store is linear in them.

    python benchmarks/nodes.py [--runs 10] [--rounds 3] [--workers 2] [--uniform 0,1,2] [--quota 0.5]
                               [--parts cause,answer,overhead,requests] [--ranks 2,8,32]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RATE = re.compile(r"rank 0 trained \d+ steps · (\d+\.\d+) it/s")
CPU_CAUSES = {"oversubscribed", "cpus_short", "cpus_taken"}
TIMEOUT_S = 300
NICE = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Node1Cgroup:
    """Node 1's own cgroup, held to ``quota`` CPUs (v2 ``cpu.max`` or v1 CFS); removed on exit. None of it without
    root: node 1 then runs at a lower priority; none at all for a ``quota`` of 0."""

    def __init__(self, quota: float) -> None:
        v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        self.path = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu") / f"dataprof-bench-node1-{os.getpid()}"
        self.made = False
        self.held = quota > 0
        if not self.held:
            return
        try:
            self.path.mkdir()
            if v2:
                (self.path / "cpu.max").write_text(f"{int(quota * 100_000)} 100000")
            else:
                (self.path / "cpu.cfs_period_us").write_text("100000")
                (self.path / "cpu.cfs_quota_us").write_text(str(int(quota * 100_000)))
            self.made = True
        except OSError as exc:
            print(f"no cgroup for node 1 ({exc}): it runs at nice -n {NICE} instead", file=sys.stderr)

    def prefix(self) -> list[str]:
        """What node 1's launch runs under: into the cgroup, or at a lower priority."""
        if self.made:
            return ["sh", "-c", f'echo $$ > {self.path / "cgroup.procs"} && exec "$@"', "node1"]
        return ["nice", "-n", str(NICE)] if self.held else []

    def close(self) -> None:
        """Remove the cgroup, once the processes still leaving it have left (a few seconds at most)."""
        for _ in range(50):
            if not self.made:
                return
            try:
                self.path.rmdir()
                return
            except OSError:  # busy: a node's processes still exiting
                time.sleep(0.2)
        print(f"{self.path} is still busy: remove it by hand", file=sys.stderr)


def two_nodes(tmp: Path, opts: argparse.Namespace, cgroup: Node1Cgroup, commands: tuple[list[str], list[str]],
              launcher: tuple[str, ...] = ("torch.distributed.run",), timeout_s: float = TIMEOUT_S) -> tuple[str, str]:
    """``torchrun --nnodes 2 --nproc-per-node 1`` (or another ``launcher`` taking torchrun's words) as node 0
    (``commands[0]``, on its CPUs) and node 1 (``commands[1]``, on its CPUs, in its cgroup), each with its own
    ``$TMPDIR``; both nodes' stdout, once both ended."""
    port = str(free_port())
    procs = []
    for node, command in enumerate(commands):
        folder = tmp / f"node{node}"
        folder.mkdir(parents=True, exist_ok=True)
        placed = ["taskset", "-c", opts.node0_cpus] if node == 0 else \
            [*cgroup.prefix(), "taskset", "-c", opts.node1_cpus]
        procs.append(subprocess.Popen(
            [*placed, sys.executable, "-m", *launcher, "--nnodes", "2", "--node-rank", str(node),
             "--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", *command],
            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(folder))))
    ended = []
    for proc in procs:
        try:
            ended.append(proc.communicate(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
    for node, proc in enumerate(procs):
        if proc.returncode:
            sys.exit(f"node {node} failed (exit {proc.returncode}); the end of each node's stderr:\n" + "\n".join(
                f"node {n}: {line}" for n, (_, e) in enumerate(ended) for line in e.strip().splitlines()[-12:]))
    return ended[0][0], ended[1][0]


def training(opts: argparse.Namespace, workers: int) -> list[str]:
    return ["examples/ddp_train.py", "--workers", str(workers), "--sleep-ms", "0", "--sample-cpu-ms",
            str(opts.sample_cpu_ms), "--batch-size", str(opts.batch_size)]


def watched(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup, index: int) -> dict[str, Any]:
    """One ``dataprof run`` of the job; node 0's document."""
    out = tmp / f"run{index}.json"
    command = ["-m", "dataprof", "run", "--seconds", str(opts.seconds), "--json", str(out),
               *training(opts, opts.workers), "--length", "1000000"]
    two_nodes(tmp / f"run{index}", opts, cgroup, (command, command))
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def tuned(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup) -> tuple[int, int] | None:
    """``dataprof tune --nnodes 2`` of the job started at ``--workers`` on both nodes: the num_workers it
    recommends on node 0 and on node 1; None when it recommends none."""
    out = tmp / "tune.json"
    commands = tuple(["--budget", str(opts.tune_budget), "--trial-steps", str(opts.steps),
                      *(["--json", str(out)] if node == 0 else []), "--workdir", str(tmp / "tune" / f"runs{node}"),
                      *training(opts, opts.workers), "--length", "1000000"] for node in (0, 1))
    two_nodes(tmp / "tune", opts, cgroup, (commands[0], commands[1]), ("dataprof", "tune"),
              timeout_s=10 * opts.tune_budget)
    document: dict[str, Any] = json.loads(out.read_text())
    chosen = document["recommended"]
    print(f"tune across the nodes: {document['reason']}")
    if chosen is None:
        return None
    common = int({**document["loader"]["settings"], **chosen["config"]}.get("num_workers") or 0)
    own = chosen["node_knobs"]
    return (int(own.get("0", {}).get("num_workers", common)), int(own.get("1", {}).get("num_workers", common)))


def job_rate(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup, workers: tuple[int, int], index: int,
             watch: bool = False) -> float:
    """The job's it/s with node 0's and node 1's ``num_workers``: rank 0's own printed rate; unwatched, or
    ``watch``ed by ``dataprof run`` on every rank to the script's own end."""
    steps = ["--steps", str(opts.steps), "--warmup", str(opts.steps // 5)]
    run = ["-m", "dataprof", "run"] if watch else []
    out, _ = two_nodes(tmp / f"job{index}{'w' if watch else ''}", opts, cgroup,
                       ([*run, *training(opts, workers[0]), *steps], [*run, *training(opts, workers[1]), *steps]))
    found = RATE.search(out)
    if found is None:
        sys.exit(f"no rate in rank 0's output: {out[-300:]}")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="num_workers on both nodes in the watched runs")
    parser.add_argument("--uniform", default="0,1,2", help="num_workers for every node, timed by hand")
    parser.add_argument("--node0-cpus", default="1", help="node 0's CPUs (taskset -c)")
    parser.add_argument("--node1-cpus", default="0", help="node 1's CPUs (taskset -c)")
    parser.add_argument("--quota", type=float, default=0.5,
                        help="node 1's cgroup CPU quota, in CPUs (0: no cgroup, its CPUs alone hold it)")
    parser.add_argument("--sample-cpu-ms", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="each watched run's length: node 1, held to its quota, takes seconds to start")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--parts", default="cause,answer,overhead",
                        help="which parts to run, of cause,answer,overhead,requests (the answer needs the cause)")
    parser.add_argument("--ranks", default="2,8,32", help="the job sizes the requests part counts at")
    parser.add_argument("--tune-budget", type=float, default=240.0,
                        help="dataprof tune --nnodes 2's --budget (0: no tune); its answer is timed by hand too")
    opts = parser.parse_args()
    cgroup = Node1Cgroup(opts.quota)
    try:
        return measure(opts, cgroup)
    finally:
        cgroup.close()


def measure(opts: argparse.Namespace, cgroup: Node1Cgroup) -> int:
    """The parts of the benchmark ``--parts`` names, as the module's docstring says; 0 when every run named the
    slow node (or none was asked for)."""
    parts = set(opts.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="dataprof-bench-nodes-") as name:
        tmp = Path(name)
        hits, there = named_cause(opts, tmp, cgroup) if "cause" in parts else (opts.runs, None)
        if "answer" in parts:
            if there is None:
                print("no num_workers named for node 1: no per-node answer to time")
            else:
                per_node_answer(opts, tmp, cgroup, there)
        if "overhead" in parts:
            overhead(opts, tmp, cgroup)
        if "requests" in parts:
            requests(opts, tmp)
    return 0 if hits == opts.runs else 1


def named_cause(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup) -> tuple[int, int | None]:
    """Part 1: the runs that named rank 1 on node 1 with a CPU cause, and the num_workers named there most."""
    causes: list[tuple[Any, ...]] = []
    for index in range(opts.runs):
        found = watched(opts, tmp, cgroup, index).get("rank_cause")
        causes.append(() if found is None else (found["rank"], found["node"], found["cause"], found["num_workers"]))
        print(f"run {index + 1}: {found['evidence'] + ' → ' + found['recommendation'] if found else 'no cause'}",
              flush=True)
    hits = sum(1 for c in causes if c and c[:2] == (1, 1) and c[2] in CPU_CAUSES)
    print(f"\nslow node named with a CPU cause: {hits} of {opts.runs}")
    named = collections.Counter(c[3] for c in causes if c and c[:2] == (1, 1) and c[3] is not None)
    return hits, named.most_common(1)[0][0] if named else None


def per_node_answer(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup, there: int) -> None:
    """Part 2: the per-node answer (and tune's) against every uniform config, timed by hand, interleaved."""
    picked = tuned(opts, tmp, cgroup) if opts.tune_budget else None
    print(f"tune's answer (node 0, node 1 workers): {picked}")
    configs = [(w, w) for w in map(int, opts.uniform.split(","))] + [(opts.workers, there)] + \
        ([picked] if picked else [])
    configs = list(dict.fromkeys(configs))
    rates: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
    for round_ in range(opts.rounds):
        for c in configs if round_ % 2 == 0 else configs[::-1]:
            rates[c].append(job_rate(opts, tmp, cgroup, c, len(rates[c]) + 10 * configs.index(c)))
    print("\nnode 0 workers, node 1 workers: job it/s (median of runs)")
    for c in configs:
        print(f"  {c[0]}, {c[1]}: {statistics.median(rates[c]):.2f}  ({', '.join(f'{r:.2f}' for r in rates[c])})")
    best = max((c for c in configs if c[0] == c[1]), key=lambda c: statistics.median(rates[c]))
    answer = (opts.workers, there)
    ratio = statistics.median(rates[answer]) / statistics.median(rates[best])
    print(f"run's per-node answer {answer} against the best uniform {best}: {ratio:.3f}×")
    if picked:
        print(f"tune's answer {picked} against the best uniform {best}: "
              f"{statistics.median(rates[picked]) / statistics.median(rates[best]):.3f}×")


def overhead(opts: argparse.Namespace, tmp: Path, cgroup: Node1Cgroup) -> None:
    """Part 3: the watch's cost to the job, watched and plain interleaved (A, B, B, A, …): each round's pair."""
    plain: list[float] = []
    watched_rates: list[float] = []
    for round_ in range(opts.rounds):
        pair = [(plain, False), (watched_rates, True)]
        for kept, watch in pair if round_ % 2 == 0 else pair[::-1]:
            kept.append(job_rate(opts, tmp, cgroup, (opts.workers, opts.workers), 100 + round_, watch))
    pairs = [w / p for w, p in zip(watched_rates, plain, strict=True)]
    print(f"watched by dataprof run against plain, w{opts.workers} on both nodes: "
          f"{statistics.median(pairs):.3f}× (median of {len(pairs)} rounds' pairs, {min(pairs):.3f} … "
          f"{max(pairs):.3f}; watched {', '.join(f'{r:.2f}' for r in watched_rates)}; "
          f"plain {', '.join(f'{r:.2f}' for r in plain)})")


def requests(opts: argparse.Namespace, tmp: Path) -> None:
    """Part 4: dataprof's store requests under ``run --seconds`` at each job size, per rank and second."""
    print("\nranks: store requests by dataprof (per rank per second of the job; by kind)")
    for ranks in map(int, opts.ranks.split(",")):
        counted = tmp / f"requests{ranks}"
        counted.mkdir()
        env = dict(os.environ, DATAPROF_BENCH_STORE_COUNT=str(counted), PYTHONPATH=os.pathsep.join(
            (str(ROOT / "benchmarks" / "_store_count"), str(ROOT))))
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                        str(ranks), "-m", "dataprof", "run", "--seconds", str(opts.seconds), "--json",
                        str(counted / "run.json"), "benchmarks/_sleep_train.py", "--length", "100000",
                        "--sleep-ms", "1", "--step-ms", "5"],
                       cwd=ROOT, env=env, check=True, capture_output=True, timeout=TIMEOUT_S + 60 * ranks)
        wall = time.monotonic() - started
        kinds: collections.Counter[str] = collections.Counter()
        for path in counted.glob("*.json"):
            if path.name != "run.json":
                kinds.update(json.loads(path.read_text()))
        total = sum(kinds.values())
        print(f"  {ranks:>3}: {total} requests in {wall:.0f} s: {total / wall:.1f}/s, "
              f"{total / wall / ranks:.2f} per rank per s ({', '.join(f'{k} {v}' for k, v in kinds.most_common())})",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())

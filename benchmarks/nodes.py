"""Two nodes on this machine, node 1 pinned to fewer CPUs: does ``dataprof run`` name the slow node with its cause,
and does the change it names for that node train faster than the best config for every node?

Each node is a ``torchrun --nnodes 2`` launch on ``127.0.0.1`` with its own ``$TMPDIR`` (separate hosts share no
directory); node 1's launch runs under ``taskset`` on ``--pin`` CPUs (and ``nice -n 10``), node 0's on all of
them: on one machine the two "nodes" share its CPUs, and without the lower priority node 0's processes on node 1's
CPU would make either node the slower one from run to run. The training is ``examples/ddp_train.py`` with samples
that cost CPU (``--sample-cpu-ms``), in lockstep through gloo's all-reduce.

1. ``--runs`` times: ``dataprof run --seconds S --json`` over the job at ``--workers`` on both nodes; a hit when the
   document's ``rank_cause`` names rank 1 on node 1 and a CPU cause (its node's CPUs).
2. The job's it/s (rank 0's own printed rate; the ranks move in lockstep), unwatched, at every ``num_workers`` in
   ``--uniform`` on both nodes and at the per-node answer (node 0 at ``--workers``, node 1 at the ``num_workers``
   the cause named), interleaved over ``--rounds``: the per-node answer's median against the best uniform one's.

    python benchmarks/nodes.py [--runs 10] [--rounds 3] [--workers 2] [--uniform 0,1,2] [--pin 0]
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


def two_nodes(tmp: Path, pin: str, commands: tuple[list[str], list[str]]) -> tuple[str, str]:
    """``torchrun --nnodes 2 --nproc-per-node 1`` as node 0 (``commands[0]``) and node 1 (``commands[1]``, pinned to
    ``pin``), each with its own ``$TMPDIR``; both nodes' stdout, once both ended."""
    port = str(free_port())
    procs = []
    for node, command in enumerate(commands):
        folder = tmp / f"node{node}"
        folder.mkdir(parents=True, exist_ok=True)
        pinned = ["taskset", "-c", pin, "nice", "-n", str(NICE)] if node == 1 else []
        procs.append(subprocess.Popen(
            [*pinned, sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
             "--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", *command],
            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(folder))))
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        if proc.returncode:
            sys.exit(f"a node failed (exit {proc.returncode}): {err.strip().splitlines()[-1:] or ''}")
        outs.append(out)
    return outs[0], outs[1]


def training(opts: argparse.Namespace, workers: int) -> list[str]:
    return ["examples/ddp_train.py", "--workers", str(workers), "--sleep-ms", "0", "--sample-cpu-ms",
            str(opts.sample_cpu_ms), "--batch-size", str(opts.batch_size)]


def watched(opts: argparse.Namespace, tmp: Path, index: int) -> dict[str, Any]:
    """One ``dataprof run`` of the job; node 0's document."""
    out = tmp / f"run{index}.json"
    command = ["-m", "dataprof", "run", "--seconds", str(opts.seconds), "--json", str(out),
               *training(opts, opts.workers), "--length", "1000000"]
    two_nodes(tmp / f"run{index}", opts.pin, (command, command))
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def job_rate(opts: argparse.Namespace, tmp: Path, workers: tuple[int, int], index: int) -> float:
    """The job's it/s, unwatched, with node 0's and node 1's ``num_workers``: rank 0's own printed rate."""
    steps = ["--steps", str(opts.steps), "--warmup", str(opts.steps // 5)]
    out, _ = two_nodes(tmp / f"job{index}", opts.pin, ([*training(opts, workers[0]), *steps],
                                                        [*training(opts, workers[1]), *steps]))
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
    parser.add_argument("--pin", default="0", help="node 1's CPUs (taskset -c)")
    parser.add_argument("--sample-cpu-ms", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--steps", type=int, default=150)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dataprof-bench-nodes-") as name:
        tmp = Path(name)
        causes: list[tuple[Any, ...]] = []
        for index in range(opts.runs):
            found = watched(opts, tmp, index).get("rank_cause")
            causes.append(() if found is None else (found["rank"], found["node"], found["cause"],
                                                    found["num_workers"]))
            print(f"run {index + 1}: {found['evidence'] + ' → ' + found['recommendation'] if found else 'no cause'}",
                  flush=True)
        hits = sum(1 for c in causes if c and c[:2] == (1, 1) and c[2] in CPU_CAUSES)
        print(f"\nslow node named with a CPU cause: {hits} of {opts.runs}")
        named = collections.Counter(c[3] for c in causes if c and c[:2] == (1, 1) and c[3] is not None)
        if not named:
            print("no num_workers named for node 1: no per-node answer to time")
            return 0 if hits == opts.runs else 1
        there = named.most_common(1)[0][0]
        configs = [(w, w) for w in map(int, opts.uniform.split(","))] + [(opts.workers, there)]
        configs = list(dict.fromkeys(configs))
        rates: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
        for round_ in range(opts.rounds):
            for c in configs if round_ % 2 == 0 else configs[::-1]:
                rates[c].append(job_rate(opts, tmp, c, len(rates[c]) + 10 * configs.index(c)))
        print("\nnode 0 workers, node 1 workers: job it/s (median of runs)")
        for c in configs:
            print(f"  {c[0]}, {c[1]}: {statistics.median(rates[c]):.2f}  ({', '.join(f'{r:.2f}' for r in rates[c])})")
        best = max((c for c in configs if c[0] == c[1]), key=lambda c: statistics.median(rates[c]))
        answer = (opts.workers, there)
        ratio = statistics.median(rates[answer]) / statistics.median(rates[best])
        print(f"per-node answer {answer} against the best uniform {best}: {ratio:.3f}×")
    return 0 if hits == opts.runs else 1


if __name__ == "__main__":
    sys.exit(main())

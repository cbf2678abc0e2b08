"""``dataprof plan``: a saved sweep's pipeline model, predicted on the machine the training will run on."""

from __future__ import annotations

from pathlib import Path

import click

from dataprof.cli.documents import DOCUMENT
from dataprof.cli.output import console, guarded, reading, write_atomic
from dataprof.cli.params import BYTES, OutputPath


@click.command()
@click.argument("document", type=DOCUMENT, metavar="RESULT")
@click.option("--cpus", type=float, default=None, metavar="C",
              help="The node's CPUs for the job (a share is fine: 3.5), shared by its ranks [default: the sweep's "
                   "per rank].")
@click.option("--ranks-per-node", type=int, default=1, show_default=True, metavar="P",
              help="Training processes (GPUs) on the node, sharing its CPUs, RAM and /dev/shm.")
@click.option("--ram", type=BYTES["--ram"], default=None, metavar="SIZE",
              help="The node's RAM for the job (32GB, 512GiB): checked against every rank's loaders.")
@click.option("--shm", type=BYTES["--shm"], default=None, metavar="SIZE",
              help="The node's /dev/shm: checked against the batches every rank's workers keep in flight.")
@click.option("--step-ms", type=float, default=None, metavar="MS",
              help="The model's step per batch there; 0: the loader's ceiling [default: the sweep's].")
@click.option("--batch-size", type=int, default=None, metavar="N", help="Batch size there [default: the sweep's].")
@click.option("--node", "node_groups", multiple=True, metavar="NODES:KEY=VALUE,…",
              help="A group of the job's nodes that differ from the rest, and what they have: 1:cpus=8 or "
                   "0,2-3:cpus=32,ranks=8,ram=256GB,shm=64GB (keys cpus, ranks, ram, shm; the others as given "
                   "above). Repeat for each group: a plan per group, and the config for each node.")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help="Write the plan document here.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@guarded
def plan(document: Path, cpus: float | None, ranks_per_node: int, ram: int | None, shm: int | None,
         step_ms: float | None, batch_size: int | None, node_groups: tuple[str, ...], json_path: Path | None,
         debug: bool) -> None:
    """Predict from a sweep's --json RESULT what the pipeline does on another machine: the samples/s of each
    num_workers there, the config for each rank, the CPUs per rank that feed the step, the RAM and /dev/shm it
    takes. Measures nothing; says where it extrapolates (docs/plan.md)."""
    from dataprof.api import plan as make
    from dataprof.render.documents import print_document

    with reading(document):
        planned = make(document, cpus=cpus, ranks_per_node=ranks_per_node, ram=ram, shm=shm, step_ms=step_ms,
                       batch_size=batch_size, node_groups=node_groups)
        print_document(console(), planned)
    if json_path is not None:
        write_atomic(json_path, planned.to_json())
